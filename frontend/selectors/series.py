"""Time series for the console charts, from the per-minute usage rollups (one query each)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from controlplane.errors import ValidationFailed
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
    "6h": (timedelta(hours=6), 300),
    "24h": (timedelta(hours=24), 900),
    "7d": (timedelta(days=7), 3600),
    "30d": (timedelta(days=30), 21600),
}
#: Bucket sizes of a custom range: the smallest that keeps it to at most MAX_BUCKETS.
STEPS = (60, 300, 900, 3600, 21600, 86400)
MAX_BUCKETS = 400
#: The longest custom range (the rollups are kept forever; a chart needs no more).
MAX_SPAN = timedelta(days=400)


class SeriesRangeInvalid(ValidationFailed):
    """A custom range that is malformed, empty, reversed or longer than ``MAX_SPAN``."""

    code = "invalid_range"


def custom_range(*, since: str, until: str) -> tuple[datetime, datetime] | None:
    """The custom range of a request's ``since``/``until`` (ISO 8601; naive is UTC), None
    when neither is given; raises :class:`SeriesRangeInvalid` for a malformed one."""
    from datetime import UTC

    from django.utils.dateparse import parse_datetime

    if not since and not until:
        return None
    try:
        moments = [parse_datetime(v) if v else None for v in (since[:40], until[:40])]
    except ValueError:
        moments = [None, None]
    if moments[0] is None or moments[1] is None:
        raise SeriesRangeInvalid(
            "A custom range needs both since and until as ISO 8601 times.",
            details={"since": since[:40], "until": until[:40]},
        )
    start, end = (m if m.tzinfo else m.replace(tzinfo=UTC) for m in moments if m)
    custom_step(since=start, until=end)
    return start, end


def custom_step(*, since: datetime, until: datetime) -> int:
    """The bucket size of a custom range; raises :class:`SeriesRangeInvalid`."""
    if until <= since:
        raise SeriesRangeInvalid("The range must end after it starts.")
    if until - since > MAX_SPAN:
        raise SeriesRangeInvalid(f"A range may span at most {MAX_SPAN.days} days.")
    seconds = (until - since).total_seconds()
    return next((s for s in STEPS if seconds / s <= MAX_BUCKETS), STEPS[-1])


def usage_series(
    *,
    tenant_ids: list[Any] | None,
    range_key: str,
    since: datetime | None = None,
    until: datetime | None = None,
) -> dict[str, Any]:
    """Hit rate, requests, spend and savings per bucket over ``range_key``, or over the
    custom ``since``..``until`` when both are given (one query).

    ``tenant_ids=None`` is the whole fleet (platform pages only). Unknown ranges fall back
    to 1 h. Every bucket of the range is present; a bucket without traffic has a null
    hit rate (no data, not 0 %). A bad custom range raises :class:`SeriesRangeInvalid`.
    """
    from django.db.models import DateTimeField, F, Func, IntegerField, Value
    from django.db.models.functions import Cast

    from billing.models import Granularity, UsageRollup

    now = timezone.now()
    if since is not None and until is not None:
        step = custom_step(since=since, until=until)
        range_key = "custom"
        end = until
    else:
        span, step = RANGES.get(range_key, RANGES["1h"])
        range_key = range_key if range_key in RANGES else "1h"
        since, end = now - span, now
    start_epoch = int(since.timestamp()) // step * step
    # all_tenants: a platform chart spans every tenant unless tenant_ids narrows it
    rollups = UsageRollup.objects.all_tenants().filter(
        granularity=Granularity.MINUTE,
        bucket__gte=datetime.fromtimestamp(start_epoch, tz=now.tzinfo),
        bucket__lt=end,
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
    for t in range(start_epoch, int(end.timestamp()) + (1 if end == now else 0), step):
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
        "range": range_key,
        "since": datetime.fromtimestamp(start_epoch, tz=now.tzinfo).isoformat(),
        "until": end.isoformat(),
        "step_seconds": step,
        "points": points,
    }
