#!/usr/bin/env bash
# Render every kustomize overlay under deploy/, validate the output against the
# Kubernetes OpenAPI schemas offline, then policy-check it with checkov.
# kubectl (Debian package `kubectl`, which bundles kustomize) renders; kubernetes-validate
# (PyPI, a test dependency) ships the JSON schemas for each Kubernetes release inside its
# wheel, so no network is needed. checkov (PyPI) lives in its own cached virtual
# environment: its dependency pins clash with the project's.
set -euo pipefail
K8S_VERSION="${CACHEPLANE_K8S_VERSION:-1.32.0}"
CHECKOV_SPEC="checkov>=3.2,<4"
if ! command -v kubectl >/dev/null; then
  echo "40-k8s-manifests: kubectl is required (apt-get install kubectl)" >&2
  exit 1
fi
tools="${XDG_CACHE_HOME:-$HOME/.cache}/cacheplane-ci/checkov-3"
if ! "$tools/bin/checkov" --version >/dev/null 2>&1; then
  rm -rf "$tools"
  python3.11 -m venv "$tools"
  "$tools/bin/pip" install -q "$CHECKOV_SPEC" 2>&1 | grep -v "^WARNING: Location" || true
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for overlay in deploy/overlays/*/; do
  name="$(basename "$overlay")"
  kubectl kustomize "$overlay" > "$out/$name.yaml"
  .venv/bin/kubernetes-validate --kubernetes-version "$K8S_VERSION" --strict --quiet "$out/$name.yaml"
  # Invariants the schemas cannot express (tests/deploy/test_manifests.py checks more).
  .venv/bin/python - "$out/$name.yaml" <<'PY'
import sys

import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
for singleton in ("cacheplane-beat", "cacheplane-kv-indexer"):
    spec = by[("Deployment", singleton)]["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate", singleton
for hpa in ("cacheplane-web", "cacheplane-gateway"):
    assert ("HorizontalPodAutoscaler", hpa) in by, hpa
    probes = by[("Deployment", hpa)]["spec"]["template"]["spec"]["containers"][0]
    assert "readinessProbe" in probes and "livenessProbe" in probes, hpa
assert any(d["kind"] == "Job" for d in docs), "migration Job"
assert any(d["kind"] == "NetworkPolicy" for d in docs), "worker NetworkPolicy"
if "production" in sys.argv[1]:
    assert not [d for d in docs if d["kind"] == "Secret"], "production renders no Secret"
print(f"{sys.argv[1]}: {len(docs)} resources rendered, valid, invariants hold")
PY
  # Every failed check fails CI; an accepted one is skipped by an annotation on its
  # resource (checkov.io/skipN: CHECK=reason), next to what it excuses.
  "$tools/bin/checkov" --quiet --compact --framework kubernetes --skip-download \
    --file "$out/$name.yaml" > "$out/$name.checkov" || {
    cat "$out/$name.checkov"
    echo "40-k8s-manifests: checkov failed on the $name overlay" >&2
    exit 1
  }
  echo "$out/$name.yaml: checkov: $(grep -o 'Passed checks: [0-9]*, Failed checks: [0-9]*, Skipped checks: [0-9]*' "$out/$name.checkov" || echo 'no findings')"
done
