#!/usr/bin/env bash
# The end-to-end tests plain `pytest` leaves out (`-m "not e2e and not browser"`): chaos,
# the `cacheplane up` start-ups, embedded attach, real Celery workers, two gateway
# processes. Same servers as the main run (DATABASE_URL / REDIS_URL from .ci/run).
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/pytest -m e2e --durations=15
