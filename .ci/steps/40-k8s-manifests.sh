#!/usr/bin/env bash
# Render every kustomize overlay under deploy/ and validate the output against the
# Kubernetes OpenAPI schemas, offline: kubectl (Debian package `kubectl`, which bundles
# kustomize) renders; kubernetes-validate (PyPI, a test dependency) ships the JSON schemas
# for each Kubernetes release inside its wheel, so no network is needed.
set -euo pipefail
K8S_VERSION="${CACHEPLANE_K8S_VERSION:-1.32.0}"
if ! command -v kubectl >/dev/null; then
  echo "40-k8s-manifests: kubectl is required (apt-get install kubectl)" >&2
  exit 1
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for overlay in deploy/overlays/*/; do
  name="$(basename "$overlay")"
  kubectl kustomize "$overlay" > "$out/$name.yaml"
  .venv/bin/kubernetes-validate --kubernetes-version "$K8S_VERSION" --strict --quiet "$out/$name.yaml"
  # Invariants the schemas cannot express.
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
print(f"{sys.argv[1]}: {len(docs)} resources rendered, valid, invariants hold")
PY
done
