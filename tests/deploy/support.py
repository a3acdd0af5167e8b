"""Rendered manifests and what the kubelet does with them, for the deploy tests.

``render`` runs ``kubectl kustomize`` as CI does (.ci/steps/40-k8s-manifests.sh).
``pod_env`` and ``expand`` follow the kubelet's rules: ``envFrom`` first, then ``env``
entries in order; ``$(VAR)`` in command and args is expanded from the whole environment,
in an exec probe only from entries with a static ``value`` (kubelet:
ExpandContainerCommandOnlyStatic), ``$$`` is a literal ``$``.
"""

from __future__ import annotations

import functools
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@functools.cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    """Every resource ``kubectl kustomize deploy/overlays/<overlay>`` renders."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required (apt-get install kubectl), as CI's manifest step"
    out = subprocess.run(
        [kubectl, "kustomize", str(REPO / "deploy" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def resource(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    """The one resource of ``kind`` called ``name``."""
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def workloads(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Every Deployment, StatefulSet and Job."""
    return [d for d in docs if d["kind"] in {"Deployment", "StatefulSet", "Job"}]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def expand(text: str, env: dict[str, str]) -> str:
    """``$(VAR)`` replaced when VAR is in ``env`` (kept verbatim otherwise); ``$$`` → ``$``."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR.sub(one, text)


def pod_env(
    container: dict[str, Any],
    *,
    pod_name: str,
    config_maps: dict[str, dict[str, str]],
    secrets: dict[str, dict[str, str]],
    base: dict[str, str],
) -> tuple[dict[str, str], dict[str, str]]:
    """The container's environment (over ``base``: the image's ENV and the runtime's
    HOSTNAME), and the subset an exec probe may expand (static ``value`` entries)."""
    env = {"HOSTNAME": socket.gethostname(), **base}
    static: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(config_maps[source["configMapRef"]["name"]])
        if "secretRef" in source:
            env.update(secrets[source["secretRef"]["name"]])
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = static[entry["name"]] = expand(entry["value"], env)
            continue
        ref = entry["valueFrom"]
        if "fieldRef" in ref:
            assert ref["fieldRef"]["fieldPath"] == "metadata.name", ref
            env[entry["name"]] = pod_name
        elif "configMapKeyRef" in ref:
            key = ref["configMapKeyRef"]
            env[entry["name"]] = config_maps[key["name"]][key["key"]]
        elif "secretKeyRef" in ref:
            key = ref["secretKeyRef"]
            if key["name"] in secrets or not key.get("optional"):
                env[entry["name"]] = secrets[key["name"]][key["key"]]
    return env, static


def containerfile() -> Any:
    """The repository's Containerfile, parsed (dockerfile-parse: a path must name a file
    called Dockerfile, so the file is handed over as an object)."""
    import io

    from dockerfile_parse import DockerfileParser

    return DockerfileParser(fileobj=io.BytesIO((REPO / "Containerfile").read_bytes()))


def containerfile_runtime_env() -> dict[str, str]:
    """The ENV of the Containerfile's final stage (the image every process runs in)."""
    return dict(containerfile().envs)
