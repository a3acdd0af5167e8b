#!/usr/bin/env bash
# The money-path property test at full size (issue 23): 2,000 random sequences of gateway
# requests, batch rows, estimates and their corrections, vLLM warm-ups and probes, cache
# lifecycles, price corrections, reprices, period boundaries, Redis restarts, tenant and
# service-account budgets; every figure (REST, PostgreSQL, Redis) equals Σ ledger + Σ storage
# after every step. The plain suite runs CACHEPLANE_LEDGER_PROPERTY_SEQUENCES' default.
# Run time (2 cores, quiet, 2026-12-06, with REST checked after every step and the
# estimate, correction, warm-up/probe and service-account steps): the step takes 164 s.
set -euo pipefail
export DATABASE_URL="${DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/cacheplane}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/15}"
CACHEPLANE_LEDGER_PROPERTY_SEQUENCES=2000 .venv/bin/pytest -q -p no:cacheprovider \
  tests/billing/test_ledger_property.py --durations=1
