"""pytest plugin: embedded PostgreSQL and Redis when DATABASE_URL / REDIS_URL are unset.

Loaded with ``-p controlplane.pytest_services`` (see pyproject.toml) so it runs before
pytest-django reads the settings. CI sets both variables to the machine's real servers
and this plugin starts nothing; a developer without services gets the embedded ones.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_services = None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:  # noqa: ANN001
    global _services
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller already exported the URLs
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return
    from controlplane.embedded import EmbeddedServices

    data_dir = Path(
        os.environ.get("CACHEPLANE_TEST_DATA_DIR") or Path.cwd() / ".cacheplane" / "test"
    )
    _services = EmbeddedServices(data_dir, persist_redis=False)
    os.environ.update(_services.start())


def pytest_unconfigure(config) -> None:  # noqa: ANN001
    global _services
    if _services is not None:
        _services.stop()
        _services = None
