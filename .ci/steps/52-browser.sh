#!/usr/bin/env bash
# The browser tests plain `pytest` leaves out (`-m "not e2e and not browser"` in
# pyproject.toml; tests/conftest.py marks every test using the `browser` fixture): the
# console's flows in Debian's Chromium with axe. They FAIL without Chromium (.ci/run
# installs it). Same servers as the main run (DATABASE_URL / REDIS_URL from .ci/run).
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/pytest -m "browser and not e2e" --durations=10
