"""KV memory pressure history per worker: the probe's per-minute rollup and its series.

Every probe (``workers_probe_task``, every 5 s) folds each worker's
``vllm:kv_cache_usage_perc`` into that worker's row for the current minute (one upsert
for the fleet: max, sum and count of the samples), so the console can draw pressure
over 1 h / 24 h / 7 d after a reload, not only what a page saw while open. Workers are
shared infrastructure: no tenant scope, platform pages only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Max, Sum
from django.utils import timezone

from workers.models import WorkerKvSample

#: How long per-minute samples are kept (the longest chart range is 7 days).
RETENTION = timedelta(days=8)

#: Where the gateway starts shedding a worker (``gateway.routing.PRESSURE``; kept equal).
PRESSURE_LINE = 0.85

#: Keys in ``Worker.metrics``: the share of the pool that cached blocks occupy (from the
#: KV index: resident blocks / pool blocks) and the pressure the gateway throttles on.
RESIDENT = "cacheplane:kv_resident_perc"
PRESSURE = "cacheplane:kv_pressure"


def kv_pressure_of(metrics: dict[str, Any]) -> float | None:
    """A worker's KV memory pressure: the larger of vLLM's ``kv_cache_usage_perc`` (blocks
    held by running requests) and the resident share (cached-but-idle blocks included,
    which vLLM's gauge counts as free). None when neither is known."""
    value = metrics.get(PRESSURE)
    if isinstance(value, int | float):
        return float(value)
    usage = metrics.get("vllm:kv_cache_usage_perc")
    return float(usage) if isinstance(usage, int | float) else None


def resident_share(*, worker_name: str, num_blocks: int | None) -> float | None:
    """Blocks the KV index holds for the worker over its pool (null block excluded); None
    without a pool size or without Redis. Best effort: a probe never fails on it."""
    if not num_blocks or num_blocks < 2:
        return None
    try:
        from controlplane.ops import redis_client
        from workers.kv_index import worker_key

        resident = int(redis_client().hlen(worker_key(worker_name)))
    except Exception:
        return None
    return min(1.0, resident / (num_blocks - 1))


#: range -> (span, bucket size in seconds), as the usage charts' ranges.
RANGES: dict[str, tuple[timedelta, int]] = {
    "1h": (timedelta(hours=1), 60),
    "24h": (timedelta(hours=24), 900),
    "7d": (timedelta(days=7), 3600),
}

_UPSERT = """
INSERT INTO workers_workerkvsample (worker_name, bucket, usage_max, usage_sum, samples)
VALUES {values}
ON CONFLICT (worker_name, bucket) DO UPDATE SET
    usage_max = GREATEST(workers_workerkvsample.usage_max, EXCLUDED.usage_max),
    usage_sum = workers_workerkvsample.usage_sum + EXCLUDED.usage_sum,
    samples = workers_workerkvsample.samples + EXCLUDED.samples
"""


def worker_kv_sample_record(*, usage: dict[str, float], at: datetime | None = None) -> int:
    """Fold one probe's KV usage (worker name -> 0..1) into the current minute's rows.

    One statement for the fleet, then rows past ``RETENTION`` are deleted (an index range
    on ``bucket``: usually nothing). Values outside 0..1 are clamped; returns how many
    workers were recorded.
    """
    now = at or timezone.now()
    bucket = now.replace(second=0, microsecond=0)
    items = sorted((name, min(1.0, max(0.0, float(v)))) for name, v in usage.items())
    if items:
        values = ", ".join(["(%s, %s, %s, %s, 1)"] * len(items))
        params: list[Any] = []
        for name, value in items:
            params += [name, bucket, value, value]
        with connection.cursor() as cursor:
            cursor.execute(_UPSERT.format(values=values), params)
    WorkerKvSample.objects.filter(bucket__lt=now - RETENTION).delete()
    return len(items)


def worker_kv_series(*, range_key: str, now: datetime | None = None) -> dict[str, Any]:
    """Per worker, the peak and mean KV usage per bucket over ``range_key`` (one query).

    Unknown ranges fall back to 1 h. Every bucket of the range is present for every
    worker seen in it; a bucket without samples is null (a gap, not 0 %).
    """
    from django.db.models import DateTimeField, F, Func, IntegerField, Value
    from django.db.models.functions import Cast

    span, step = RANGES.get(range_key, RANGES["1h"])
    now = now or timezone.now()
    start_epoch = int((now - span).timestamp()) // step * step
    epoch = Cast(Func(Value("epoch"), F("bucket"), function="date_part"), IntegerField())
    slot = Func((epoch / step) * step, function="to_timestamp", output_field=DateTimeField())
    rows = (
        WorkerKvSample.objects.filter(
            bucket__gte=datetime.fromtimestamp(start_epoch, tz=now.tzinfo)
        )
        .annotate(slot=slot)
        .values("worker_name", "slot")
        .annotate(peak=Max("usage_max"), total=Sum("usage_sum"), n=Sum("samples"))
        .order_by("worker_name", "slot")
    )
    found: dict[str, dict[int, Any]] = {}
    for r in rows:
        found.setdefault(r["worker_name"], {})[int(r["slot"].timestamp())] = r
    slots = range(start_epoch, int(now.timestamp()) + 1, step)
    workers = {}
    for name, by_slot in sorted(found.items()):
        points = []
        for t in slots:
            sample = by_slot.get(t)
            points.append(
                {
                    "at": datetime.fromtimestamp(t, tz=now.tzinfo).isoformat(),
                    "max": round(sample["peak"], 4) if sample else None,
                    "mean": round(sample["total"] / sample["n"], 4)
                    if sample and sample["n"]
                    else None,
                }
            )
        workers[name] = points
    return {
        "range": range_key if range_key in RANGES else "1h",
        "step_seconds": step,
        "threshold": PRESSURE_LINE,
        "workers": workers,
    }
