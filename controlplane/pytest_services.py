"""pytest plugin: embedded PostgreSQL and Redis when DATABASE_URL / REDIS_URL are unset.

Loaded with ``-p controlplane.pytest_services`` (see pyproject.toml) so it runs before
pytest-django reads the settings. CI sets both variables to the machine's real servers
and this plugin starts nothing; a developer without services gets the embedded ones.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from controlplane.embedded import EmbeddedServices

_services: EmbeddedServices | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    global _services
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller already exported the URLs
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return
    from controlplane.embedded import EmbeddedServices

    # A fresh folder per run (initdb takes about a second): concurrent runs never share
    # or stop each other's servers.
    base = Path.cwd() / ".cacheplane" / "test-runs"
    base.mkdir(parents=True, exist_ok=True)
    _services = EmbeddedServices(Path(tempfile.mkdtemp(dir=base)), persist_redis=False)
    os.environ.update(_services.start())


def pytest_unconfigure(config: pytest.Config) -> None:
    global _services
    if _services is not None:
        _services.stop()
        shutil.rmtree(_services.data_dir, ignore_errors=True)
        _services = None
