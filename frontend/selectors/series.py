"""Time series for the console charts, from the per-minute usage rollups (one query each)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from frontend.selectors.common import usd


def hit_series(*, tenant_ids: list[Any] | None, minutes: int = 60) -> list[dict[str, Any]]:
    """Per-minute prompt and cached tokens (and spend) for the last ``minutes``."""
    from billing.models import Granularity, UsageRollup

    since = timezone.now() - timedelta(minutes=minutes)
    # all_tenants: platform overview spans tenants (callers hold tenants.list)
    rollups = UsageRollup.objects.all_tenants().filter(
        granularity=Granularity.MINUTE, bucket__gte=since
    )
    if tenant_ids is not None:
        rollups = rollups.filter(tenant_id__in=tenant_ids)
    rows = (
        rollups.values("bucket")
        .annotate(
            prompt=Sum("prompt_tokens"),
            cached=Sum("cached_read_tokens"),
            cost=Sum("cost_micros"),
            requests=Sum("requests"),
        )
        .order_by("bucket")
    )
    return [
        {
            "at": r["bucket"].isoformat(),
            "prompt_tokens": r["prompt"],
            "cached_tokens": r["cached"],
            "cost_usd": usd(r["cost"]),
            "requests": r["requests"],
            "hit_rate": round(r["cached"] / r["prompt"], 4) if r["prompt"] else None,
        }
        for r in rows
    ]


# range -> (span, bucket size in seconds); buckets come from the per-minute rollups,
# truncated in the database, and empty buckets are filled so the time axis shows gaps.
RANGES: dict[str, tuple[timedelta, int]] = {
    "1h": (timedelta(hours=1), 60),
    "24h": (timedelta(hours=24), 900),
    "7d": (timedelta(days=7), 3600),
}


def usage_series(*, tenant_ids: list[Any] | None, range_key: str) -> dict[str, Any]:
    """Hit rate, requests, spend and savings per bucket over ``range_key`` (one query).

    ``tenant_ids=None`` is the whole fleet (platform pages only). Unknown ranges fall back
    to 1 h. Every bucket of the range is present; a bucket without traffic has a null
    hit rate (no data, not 0 %).
    """
    from django.db.models import DateTimeField, F, Func, IntegerField, Value
    from django.db.models.functions import Cast

    from billing.models import Granularity, UsageRollup

    span, step = RANGES.get(range_key, RANGES["1h"])
    now = timezone.now()
    start_epoch = int((now - span).timestamp()) // step * step
    # all_tenants: a platform chart spans every tenant unless tenant_ids narrows it
    rollups = UsageRollup.objects.all_tenants().filter(
        granularity=Granularity.MINUTE,
        bucket__gte=datetime.fromtimestamp(start_epoch, tz=now.tzinfo),
    )
    if tenant_ids is not None:
        rollups = rollups.filter(tenant_id__in=tenant_ids)
    epoch = Cast(Func(Value("epoch"), F("bucket"), function="date_part"), IntegerField())
    slot = Func((epoch / step) * step, function="to_timestamp", output_field=DateTimeField())
    rows = {
        int(r["slot"].timestamp()): r
        for r in rollups.annotate(slot=slot)
        .values("slot")
        .annotate(
            prompt=Sum("prompt_tokens"),
            cached=Sum("cached_read_tokens"),
            cost=Sum("cost_micros"),
            without=Sum("cost_without_cache_micros"),
            requests=Sum("requests"),
        )
        .order_by("slot")
    }
    points = []
    for t in range(start_epoch, int(now.timestamp()) + 1, step):
        r = rows.get(t)
        prompt = r["prompt"] if r else 0
        points.append(
            {
                "at": datetime.fromtimestamp(t, tz=now.tzinfo).isoformat(),
                "requests": r["requests"] if r else 0,
                "hit_rate": round(r["cached"] / prompt, 4) if r and prompt else None,
                "cost_usd": usd(r["cost"]) if r else 0.0,
                "saved_usd": usd(max(0, r["without"] - r["cost"])) if r else 0.0,
            }
        )
    return {
        "range": range_key if range_key in RANGES else "1h",
        "step_seconds": step,
        "points": points,
    }
