#!/usr/bin/env bash
# mypy --strict (django-stubs, djangorestframework-stubs) on the strict set: the packages
# listed in pyproject.toml's [tool.mypy] files. First the ratchet: no entry that the merge
# base with main had may be dropped (.ci/mypy_ratchet.py). pre-commit runs this same script.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The django-stubs plugin imports the settings, which refuse to load without these; mypy
# connects to neither.
export DATABASE_URL="${DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/cacheplane}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/15}"
.venv/bin/python .ci/mypy_ratchet.py
.venv/bin/mypy
