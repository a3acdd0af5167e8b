"""The rendered overlays hold what the schemas cannot say: no shipped secret, least
privilege, probes, disruption budgets, limits and the wiring each process needs."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.deploy.support import REPO, pod_spec, render, resource, workloads

OVERLAYS = ("dev", "production")


def _secret_refs(docs: tuple[dict[str, Any], ...]) -> dict[str, set[str]]:
    """Secret name → keys read (``*`` for a whole-Secret ``envFrom``)."""
    refs: dict[str, set[str]] = {}
    for workload in workloads(docs):
        for container in pod_spec(workload)["containers"]:
            for source in container.get("envFrom", []):
                if "secretRef" in source:
                    refs.setdefault(source["secretRef"]["name"], set()).add("*")
            for entry in container.get("env", []):
                key = entry.get("valueFrom", {}).get("secretKeyRef")
                if key:
                    refs.setdefault(key["name"], set()).add(key["key"])
    return refs


def test_production_renders_no_secret_and_the_example_provides_every_one_it_references() -> None:
    docs = render("production")
    assert [d for d in docs if d["kind"] == "Secret"] == []
    examples = list(
        yaml.safe_load_all((REPO / "deploy/examples/external-secrets.yaml").read_text())
    )
    provided = {
        e["spec"]["target"]["name"]: {item["secretKey"] for item in e["spec"]["data"]}
        for e in examples
    }
    app_keys = {
        "CACHEPLANE_SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "CACHEPLANE_VLLM_API_KEY",
        "CACHEPLANE_METRICS_TOKEN",
    }
    for name, keys in _secret_refs(docs).items():
        assert name in provided, name
        assert (keys - {"*"}) <= provided[name], (name, keys)
    assert provided["cacheplane-secrets"] == app_keys


def test_only_the_migrate_job_can_read_the_owner_role() -> None:
    for overlay in OVERLAYS:
        docs = render(overlay)
        readers = [
            w["metadata"]["name"]
            for w in workloads(docs)
            if any(
                "cacheplane-migrate" in str(c.get("env", [])) + str(c.get("envFrom", []))
                for c in pod_spec(w)["containers"]
            )
        ]
        assert readers == ["cacheplane-migrate"], overlay
        job = resource(docs, "Job", "cacheplane-migrate")
        (container,) = pod_spec(job)["containers"]
        assert container["command"][:3] == ["cacheplane", "manage", "migrate"]
        assert "DATABASE_MIGRATE_URL" in {e["name"] for e in container["env"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_runs_unprivileged_with_requests_and_limits(overlay: str) -> None:
    for workload in workloads(render(overlay)):
        spec = pod_spec(workload)
        name = workload["metadata"]["name"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] >= 10000, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            resources = container["resources"]
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources[bound]), (name, bound)
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, name  # the one writable path a read-only root needs


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_replicated_workloads_have_disruption_budgets_and_the_gateway_spreads(
    overlay: str,
) -> None:
    docs = render(overlay)
    budgets = {
        d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        for d in docs
        if d["kind"] == "PodDisruptionBudget"
    }
    for name in ("cacheplane-web", "cacheplane-gateway", "cacheplane-celery", "cacheplane-worker"):
        assert name in budgets, name
    # A singleton with a budget would block every node drain.
    assert not budgets & {"cacheplane-beat", "cacheplane-kv-indexer"}
    gateway = pod_spec(resource(docs, "Deployment", "cacheplane-gateway"))
    keys = {c["topologyKey"] for c in gateway["topologySpreadConstraints"]}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert resource(docs, "HorizontalPodAutoscaler", "cacheplane-gateway")
    deny = resource(docs, "NetworkPolicy", "cacheplane-default-deny-ingress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_uvicorn_trusts_forwarded_headers_only_from_the_configured_proxies(overlay: str) -> None:
    docs = render(overlay)
    config = resource(docs, "ConfigMap", "cacheplane-config")["data"]
    for name in ("cacheplane-web", "cacheplane-gateway"):
        (container,) = pod_spec(resource(docs, "Deployment", name))["containers"]
        command = container["command"]
        assert "--proxy-headers" in command
        value = command[command.index("--forwarded-allow-ips") + 1]
        assert value == "$(FORWARDED_ALLOW_IPS)", name
        (entry,) = [e for e in container["env"] if e["name"] == "FORWARDED_ALLOW_IPS"]
        assert entry["valueFrom"]["configMapKeyRef"]["key"] in config


def test_gpu_workers_get_a_startup_probe_a_model_hub_token_and_register_their_events() -> None:
    worker = resource(render("production"), "StatefulSet", "cacheplane-worker")
    (container,) = pod_spec(worker)["containers"]
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 600  # minutes to load 8B
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "cacheplane-model-hub"
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "CACHEPLANE_VLLM_API_KEY"
    command = container["command"]
    assert command[:4] == ["cacheplane", "worker", "--engine", "vllm"]
    endpoint = command[command.index("--kv-events-endpoint") + 1]
    assert endpoint == "tcp://*:5557,tcp://*:5558"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_the_generated_vllm_command_has_a_replay_socket_and_the_workers_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from workers.engine_launch import _parser, build_launch

    monkeypatch.setenv("CACHEPLANE_VLLM_API_KEY", "k-3f9a1c")
    args, rest = _parser().parse_known_args(
        ["--engine", "vllm", "--kv-events-endpoint", "tcp://*:5557,tcp://*:5558"]
    )
    launch = build_launch(args, [*rest, "--model", "meta-llama/Llama-3.1-8B-Instruct"])
    argv, env = launch.argv, launch.env
    events = json.loads(argv[argv.index("--kv-events-config") + 1])
    assert events["endpoint"] == "tcp://*:5557"
    assert events["replay_endpoint"] == "tcp://*:5558"
    assert env["VLLM_API_KEY"] == "k-3f9a1c"
    assert "k-3f9a1c" not in " ".join(argv)  # never on the command line, where ps shows it
