"""Registering workers and recording what their metrics say."""

from __future__ import annotations

import logging
from typing import Any

import httpx
from django.db import transaction
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot, values_snapshot
from controlplane.errors import ValidationFailed
from tenants.actor import Actor
from workers.models import Worker, WorkerState
from workers.secrets import seal

logger = logging.getLogger(__name__)


ENGINES = ("reference", "vllm")


class WorkerRegistrationInvalid(ValidationFailed):
    """A registration that cannot work as given (the message says what to change)."""

    code = "worker_registration_invalid"


def kv_events_problem(endpoint_field: str) -> str:
    """Why ``PUB[,REPLAY]`` cannot be subscribed to, or "" when it can.

    vLLM 0.32's publisher *binds* its PUB socket only when the endpoint contains ``*`` or
    ``::`` or is ``ipc://``/``inproc://``; any other address (``tcp://0.0.0.0:P``
    included) makes it *connect* to a collector there. The indexer connects too, so
    nothing would ever arrive. (The replay ROUTER always binds.)
    """
    parts = [p.strip() for p in endpoint_field.split(",") if p.strip()]
    if len(parts) > 2:
        return "kv_events_endpoint is PUB[,REPLAY]: at most two endpoints."
    for part in parts:
        if not part.startswith(("tcp://", "ipc://", "inproc://")):
            return f"{part!r} is not a ZMQ endpoint (tcp://*:5557, ipc://...)."
    pub = parts[0] if parts else ""
    binds = "*" in pub or "::" in pub or pub.startswith(("ipc://", "inproc://"))
    if pub and not binds:
        port = pub.rsplit(":", 1)[-1]
        return (
            f"vLLM connects (does not bind) when its KV-events endpoint has no wildcard "
            f"({pub}; tcp://0.0.0.0:P connects too), so the indexer would receive nothing: "
            f"start vLLM with tcp://*:{port} and register that; the indexer connects to the "
            f"worker's base_url host."
        )
    return ""


@transaction.atomic
def worker_register(
    *,
    actor: Actor,
    name: str,
    base_url: str,
    model: str,
    pool: str = "default",
    engine: str = "reference",
    engine_version: str = "",
    kv_events_endpoint: str = "",
    dev_mode: bool = False,
    hash_seed: str = "0",
    tokenizer: str = "",
    api_key: str | None = None,
) -> Worker:
    """Create or update the worker called ``name`` (a restart on a new port re-registers).

    ``api_key`` is sealed (``workers.secrets``) and audited as "[redacted]"; None keeps
    the stored key, "" removes it. Raises :class:`WorkerRegistrationInvalid` (nothing is
    written) for an unknown engine or a KV-events endpoint vLLM would connect to.
    """
    if engine not in ENGINES:
        raise WorkerRegistrationInvalid(f"engine must be one of {', '.join(ENGINES)}.")
    problem = kv_events_problem(kv_events_endpoint)
    if problem:
        raise WorkerRegistrationInvalid(problem, details={"field": "kv_events_endpoint"})
    worker = Worker.objects.select_for_update().filter(name=name).first()
    before = model_snapshot(worker) if worker else EMPTY
    Worker.objects.filter(base_url=base_url).exclude(name=name).delete()  # stale address
    defaults: dict[str, Any] = {
        "base_url": base_url.rstrip("/"),
        "model": model,
        "pool": pool,
        "engine": engine,
        "kv_events_endpoint": kv_events_endpoint,
        "dev_mode": dev_mode,
        "hash_seed": hash_seed,
        "tokenizer": tokenizer,
        "state": WorkerState.HEALTHY,
        "last_seen_at": timezone.now(),
    }
    if engine_version:
        defaults["engine_version"] = engine_version[:40]
    if api_key is not None:
        defaults["api_key_sealed"] = seal(api_key)
    worker, _ = Worker.objects.update_or_create(name=name, defaults=defaults)
    audit_record(
        actor=actor,
        action="workers.worker.register",
        tenant=None,
        target_type="worker",
        target_id=str(worker.pk),
        changes=diff(before, model_snapshot(worker)),
    )
    return worker


def worker_set_draining(*, actor: Actor, worker: Worker, draining: bool) -> Worker:
    """Stop (or resume) routing new requests to a worker; its caches stay where they are.

    The gateway routes to healthy workers only, so a draining worker finishes what it has.
    Probes keep a healthy draining worker draining. Audited as ``workers.worker.drain``.
    """
    with transaction.atomic():
        locked = Worker.objects.select_for_update().get(pk=worker.pk)
        before = locked.state
        locked.state = WorkerState.DRAINING if draining else WorkerState.HEALTHY
        locked.save(update_fields=["state", "updated_at"])
        audit_record(
            actor=actor,
            action="workers.worker.drain" if draining else "workers.worker.undrain",
            tenant=None,
            target_type="worker",
            target_id=str(locked.pk),
            changes=diff(
                values_snapshot({"state": before}), values_snapshot({"state": locked.state})
            ),
        )
    return locked


def worker_remove(*, actor: Actor, worker: Worker) -> None:
    """Deregister a worker (a running process re-registers itself when it restarts).

    Audited as ``workers.worker.remove``.
    """
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="workers.worker.remove",
            tenant=None,
            target_type="worker",
            target_id=str(worker.pk),
            changes=diff(model_snapshot(worker), EMPTY),
        )
        Worker.objects.filter(pk=worker.pk).delete()
    from workers.kv_index import worker_forget

    worker_forget(worker.name)  # routing hook: a removed worker leaves the KV index at once


#: Metric samples copied into ``Worker.metrics`` (vLLM names).
_SNAPSHOT_SAMPLES = frozenset(
    {
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
    }
)


class WorkerProbeFailed(Exception):
    """A worker answered, but not like a vLLM server (bad status, not Prometheus text)."""


def _scrape(
    *, worker: Worker, client: httpx.Client
) -> tuple[dict[str, float | str], dict[str, Any]]:
    """GET /health and /metrics; the snapshot and capacity fields, or WorkerProbeFailed /
    httpx.HTTPError. Parsing is fully done before anything is assigned to the worker."""
    health = client.get(f"{worker.base_url}/health")
    if health.status_code != 200:
        raise WorkerProbeFailed(f"/health answered {health.status_code}")
    metrics = client.get(f"{worker.base_url}/metrics")
    if metrics.status_code != 200:
        raise WorkerProbeFailed(f"/metrics answered {metrics.status_code}")
    snapshot: dict[str, float | str] = {}
    capacity: dict[str, Any] = {}
    try:
        for family in text_string_to_metric_families(metrics.text):
            for sample in family.samples:
                if sample.name == "vllm:cache_config_info":
                    capacity["block_size"] = int(sample.labels.get("block_size", worker.block_size))
                    blocks = sample.labels.get("num_gpu_blocks")
                    capacity["num_blocks"] = int(blocks) if blocks and blocks.isdigit() else None
                    algo = sample.labels.get("prefix_caching_hash_algo")
                    if algo and algo != "None":
                        capacity["hash_algo"] = algo
                elif sample.name in _SNAPSHOT_SAMPLES:
                    snapshot[sample.name] = sample.value
                elif sample.name == "vllm:gpu_cache_usage_perc":  # removed in vLLM 0.12
                    snapshot.setdefault("vllm:kv_cache_usage_perc", sample.value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        # prometheus_client's parser raises these on text that is not exposition format.
        raise WorkerProbeFailed(f"/metrics is not Prometheus text ({exc})") from None
    version = client.get(f"{worker.base_url}/version")
    if version.status_code == 200:
        try:
            reported = version.json().get("version")
        except (ValueError, AttributeError):
            reported = None
        if isinstance(reported, str) and reported:
            capacity["engine_version"] = reported[:40]
    return snapshot, capacity


def worker_probe(*, worker: Worker, client: httpx.Client | None = None) -> Worker:
    """Read /health and /metrics; record state, capacity and a metrics snapshot.

    Any failure of this one worker (unreachable, an error status, /metrics that is not
    Prometheus text) marks it unhealthy with the reason in ``metrics["probe_error"]``
    and raises nothing, so probing the others goes on; the next successful probe marks it
    healthy again. A draining worker stays draining (an operator's decision).
    """
    owned = client is None
    client = client or httpx.Client(timeout=5)
    try:
        snapshot, capacity = _scrape(worker=worker, client=client)
        error = ""
    except (httpx.HTTPError, WorkerProbeFailed) as exc:
        snapshot, capacity, error = {}, {}, str(exc) or type(exc).__name__
        # One WARNING when a worker goes unhealthy, not one per 5 s probe while it stays so
        # (that filled the Celery log of an idle system).
        log = logger.warning if worker.state != WorkerState.UNHEALTHY else logger.debug
        log("worker probe failed", extra={"worker": worker.name, "error": error[:200]})
    finally:
        if owned:
            client.close()
    if not error and worker.state == WorkerState.UNHEALTHY:
        logger.warning("worker recovered", extra={"worker": worker.name})
    for name, value in capacity.items():
        setattr(worker, name, value)
    if worker.state != WorkerState.DRAINING:
        worker.state = WorkerState.UNHEALTHY if error else WorkerState.HEALTHY
    if not error and worker.kv_events_endpoint:
        from workers.kv_pressure import PRESSURE, RESIDENT, resident_share

        resident = resident_share(worker_name=worker.name, num_blocks=worker.num_blocks)
        if resident is not None:
            usage = snapshot.get("vllm:kv_cache_usage_perc")
            snapshot[RESIDENT] = round(resident, 4)
            snapshot[PRESSURE] = max(resident, float(usage) if isinstance(usage, float) else 0.0)
    worker.metrics = {**snapshot, "probe_error": error[:300]} if error else snapshot
    if not error:
        worker.last_seen_at = timezone.now()
    worker.save(
        update_fields=[
            "block_size",
            "num_blocks",
            "hash_algo",
            "engine_version",
            "state",
            "metrics",
            "last_seen_at",
            "updated_at",
        ]
    )
    if error:
        from workers.kv_index import worker_forget

        worker_forget(worker.name)  # routing hook: an unhealthy worker leaves the KV index
    return worker


def workers_probe_all(*, client: httpx.Client | None = None) -> list[Worker]:
    """Probe every registered worker and publish one fleet snapshot (platform topic).

    Workers are shared infrastructure, so this reads across tenants by design; the
    snapshot carries no tenant data. One worker's failure never stops the others: each
    probe records its own outcome, and an unexpected error is logged and that worker
    marked unhealthy.
    """
    from controlplane.live import platform_group, publish_now

    owned = client is None
    client = client or httpx.Client(timeout=3)
    probed: list[Worker] = []
    try:
        for worker in Worker.objects.order_by("name"):
            try:
                probed.append(worker_probe(worker=worker, client=client))
            except Exception:
                logger.exception("worker probe crashed", extra={"worker": worker.name})
                Worker.objects.filter(pk=worker.pk).exclude(state=WorkerState.DRAINING).update(
                    state=WorkerState.UNHEALTHY, updated_at=timezone.now()
                )
    finally:
        if owned:
            client.close()
    from workers.kv_pressure import kv_pressure_of, worker_kv_sample_record

    pressure = {w.name: kv_pressure_of(w.metrics) for w in probed}
    worker_kv_sample_record(  # the stored history behind the workers page's KV chart
        usage={name: value for name, value in pressure.items() if value is not None}
    )
    publish_now(
        platform_group("workers"),
        "workers.snapshot",
        {
            "workers": [
                {
                    "name": w.name,
                    "state": w.state,
                    "pool": w.pool,
                    "model": w.model,
                    "kv_usage": pressure.get(w.name),
                    "running": w.metrics.get("vllm:num_requests_running"),
                    "waiting": w.metrics.get("vllm:num_requests_waiting"),
                    "hit_rate": _hit_rate(w.metrics),
                }
                for w in probed
            ]
        },
    )
    return probed


def _hit_rate(metrics: dict[str, Any]) -> float | None:
    queries = metrics.get("vllm:prefix_cache_queries_total") or 0
    return (
        round((metrics.get("vllm:prefix_cache_hits_total") or 0) / queries, 4) if queries else None
    )
