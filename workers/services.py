"""Registering workers and recording what their metrics say."""

from __future__ import annotations

import logging

import httpx
from django.db import transaction
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from audit.services import audit_record
from tenants.actor import Actor
from workers.models import Worker, WorkerState

logger = logging.getLogger(__name__)


@transaction.atomic
def worker_register(
    *,
    actor: Actor,
    name: str,
    base_url: str,
    model: str,
    pool: str = "default",
    engine: str = "reference",
    kv_events_endpoint: str = "",
    dev_mode: bool = False,
) -> Worker:
    """Create or update the worker called ``name`` (a restart on a new port re-registers)."""
    worker = Worker.objects.select_for_update().filter(name=name).first()
    before = (
        {"base_url": worker.base_url, "model": worker.model, "pool": worker.pool} if worker else {}
    )
    Worker.objects.filter(base_url=base_url).exclude(name=name).delete()  # stale address
    worker, _ = Worker.objects.update_or_create(
        name=name,
        defaults={
            "base_url": base_url.rstrip("/"),
            "model": model,
            "pool": pool,
            "engine": engine,
            "kv_events_endpoint": kv_events_endpoint,
            "dev_mode": dev_mode,
            "state": WorkerState.HEALTHY,
            "last_seen_at": timezone.now(),
        },
    )
    after = {"base_url": worker.base_url, "model": worker.model, "pool": worker.pool}
    audit_record(
        actor=actor,
        action="workers.worker.register",
        tenant=None,
        target_type="worker",
        target_id=str(worker.pk),
        changes={
            k: {"before": before.get(k), "after": v} for k, v in after.items() if before.get(k) != v
        },
    )
    return worker


def worker_probe(*, worker: Worker, client: httpx.Client | None = None) -> Worker:
    """Read /health and /metrics; record state, capacity and a metrics snapshot."""
    client = client or httpx.Client(timeout=5)
    snapshot: dict[str, float | str] = {}
    try:
        healthy = client.get(f"{worker.base_url}/health").status_code == 200
        text = client.get(f"{worker.base_url}/metrics").text
    except httpx.HTTPError as exc:
        logger.warning("worker unreachable", extra={"worker": worker.name, "error": str(exc)})
        healthy, text = False, ""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                worker.block_size = int(sample.labels.get("block_size", worker.block_size))
                blocks = sample.labels.get("num_gpu_blocks")
                worker.num_blocks = int(blocks) if blocks and blocks.isdigit() else None
            elif sample.name in (
                "vllm:kv_cache_usage_perc",
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:prefix_cache_queries_total",
                "vllm:prefix_cache_hits_total",
                "vllm:num_preemptions_total",
            ):
                snapshot[sample.name] = sample.value
            elif sample.name == "vllm:gpu_cache_usage_perc":  # removed in vLLM 0.12
                snapshot.setdefault("vllm:kv_cache_usage_perc", sample.value)
    worker.state = WorkerState.HEALTHY if healthy else WorkerState.UNHEALTHY
    worker.metrics = snapshot
    if healthy:
        worker.last_seen_at = timezone.now()
    worker.save(
        update_fields=["block_size", "num_blocks", "state", "metrics", "last_seen_at", "updated_at"]
    )
    return worker


def workers_probe_all(*, client: httpx.Client | None = None) -> list[Worker]:
    """Probe every registered worker and publish one fleet snapshot (platform topic).

    Workers are shared infrastructure, so this reads across tenants by design; the
    snapshot carries no tenant data.
    """
    from controlplane.live import platform_group, publish_now

    client = client or httpx.Client(timeout=3)
    probed = [worker_probe(worker=w, client=client) for w in Worker.objects.order_by("name")]
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
                    "kv_usage": w.metrics.get("vllm:kv_cache_usage_perc"),
                    "running": w.metrics.get("vllm:num_requests_running"),
                    "waiting": w.metrics.get("vllm:num_requests_waiting"),
                    "hit_rate": _hit_rate(w.metrics),
                }
                for w in probed
            ]
        },
    )
    return probed


def _hit_rate(metrics: dict) -> float | None:
    queries = metrics.get("vllm:prefix_cache_queries_total") or 0
    return (
        round((metrics.get("vllm:prefix_cache_hits_total") or 0) / queries, 4) if queries else None
    )
