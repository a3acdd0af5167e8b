"""Reading usage and spend: ledger rows, rollups, storage, savings.

The CSV export is ``billing.selectors.spend_export``, cost quotes and reservation bounds
``billing.selectors.usage_quotes``.

Every tenant-owned read takes the tenant explicitly. Spend = request costs (ledger or
rollups) + storage accruals. Sums are taken over the exact nano-USD columns and turned
into µ$ once, at the end (the price of the sum, never a sum of rounded prices).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db.models import Count, Model, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDay

from billing.models import (
    Granularity,
    StorageAccrual,
    UsageRecord,
    UsageRollup,
)
from billing.pricing import (
    nanos_to_micros,
)
from tenants.models import Tenant

DAY = timedelta(days=1)


def usage_list(
    *,
    tenant: Tenant,
    since: datetime | None = None,
    until: datetime | None = None,
    model: str | None = None,
    cache_id: str | None = None,
) -> QuerySet[UsageRecord]:
    """The tenant's ledger rows, filtered by time, model and cache."""
    qs = UsageRecord.objects.filter(tenant=tenant)
    if since is not None:
        qs = qs.filter(occurred_at__gte=since)
    if until is not None:
        qs = qs.filter(occurred_at__lt=until)
    if model:
        qs = qs.filter(model=model)
    if cache_id:
        qs = qs.filter(cache_id=cache_id)
    return qs


def _sum(qs: QuerySet[Model], field: str) -> int:
    return int(qs.aggregate(v=Coalesce(Sum(field), 0))["v"])


def _day_ceil(moment: datetime) -> datetime:
    floor = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return floor if floor == moment else floor + DAY


def tenant_spend_nanos(
    *,
    tenant_id: UUID | str,
    since: datetime,
    until: datetime,
    principal_id: UUID | str | None = None,
) -> int:
    """What the tenant (or one principal) spent in [since, until), exactly, in nano-USD.

    Tenant-wide: whole days from day rollups, the ragged edges from minute rollups (cheap
    at any volume), plus storage. Per principal: the ledger (rollups carry no
    principal); storage is charged to the tenant, not to a principal.
    """
    if until <= since:
        return 0
    if principal_id is not None:
        return _sum(
            UsageRecord.objects.filter(
                tenant_id=tenant_id,
                principal_id=principal_id,
                occurred_at__gte=since,
                occurred_at__lt=until,
            ),
            "cost_nanos",
        )
    requests = _sum(_rollups_in_range(tenant_id=tenant_id, since=since, until=until), "cost_nanos")
    storage = _sum(
        StorageAccrual.objects.filter(tenant_id=tenant_id, hour__gte=since, hour__lt=until),
        "cost_nanos",
    )
    return requests + storage


def tenant_spend_micros(
    *,
    tenant_id: UUID | str,
    since: datetime,
    until: datetime,
    principal_id: UUID | str | None = None,
) -> int:
    """:func:`tenant_spend_nanos` in µ$ (one rounding of the exact total)."""
    return nanos_to_micros(
        tenant_spend_nanos(tenant_id=tenant_id, since=since, until=until, principal_id=principal_id)
    )


GROUPS = ("day", "model", "provider", "cache")


_SUMS = (
    "requests",
    "unpriced_requests",
    "cost_nanos",
    "cost_without_cache_nanos",
    "prompt_tokens",
    "cached_read_tokens",
    "output_tokens",
    "thinking_tokens",
)


def _rollups_in_range(
    *, tenant_id: UUID | str, since: datetime, until: datetime
) -> QuerySet[UsageRollup]:
    """Rollup rows covering exactly [since, until): day rollups for the whole days inside
    it, minute rollups for the ragged edges (exact to the minute at any volume)."""
    since, until = since.astimezone(UTC), until.astimezone(UTC)  # rollup days are UTC days
    first_day = _day_ceil(since)
    last_day = until.replace(hour=0, minute=0, second=0, microsecond=0)
    rollups = UsageRollup.objects.filter(tenant_id=tenant_id)
    if first_day >= last_day:
        return rollups.filter(granularity=Granularity.MINUTE, bucket__gte=since, bucket__lt=until)
    whole = Q(granularity=Granularity.DAY, bucket__gte=first_day, bucket__lt=last_day)
    edges = Q(granularity=Granularity.MINUTE) & (
        Q(bucket__gte=since, bucket__lt=first_day) | Q(bucket__gte=last_day, bucket__lt=until)
    )
    return rollups.filter(whole | edges)


def spend_grouped(
    *, tenant: Tenant, since: datetime, until: datetime, group_by: str
) -> list[dict[str, Any]]:
    """Spend, cost without cache and requests in [since, until) per day, model, provider
    or cache (day/model/provider from rollups; cache from the ledger plus storage)."""
    if group_by == "cache":
        return spend_by_cache(tenant=tenant, since=since, until=until)
    rollups = _rollups_in_range(tenant_id=tenant.pk, since=since, until=until)
    storage = StorageAccrual.objects.filter(tenant=tenant, hour__gte=since, hour__lt=until)
    if group_by == "day":
        rollups = rollups.annotate(k=TruncDay("bucket"))
        storage = storage.annotate(k=TruncDay("hour"))
        keys = ["k"]
    else:
        keys = ["provider", "model"] if group_by == "model" else ["provider"]
    totals: dict[tuple[Any, ...], dict[str, int]] = {}
    for row in rollups.values(*keys).annotate(**{f: Sum(f) for f in _SUMS}):
        key = tuple(row[k] for k in keys)
        entry = totals.setdefault(key, {f: 0 for f in _SUMS} | {"storage": 0})
        for f in _SUMS:
            entry[f] += int(row[f] or 0)
    for row in storage.values(*keys).annotate(s=Sum("cost_nanos")):
        key = tuple(row[k] for k in keys)
        totals.setdefault(key, {f: 0 for f in _SUMS} | {"storage": 0})["storage"] += int(row["s"])
    return [_group_row(key, totals[key], group_by) for key in sorted(totals)]


def _group_row(key: tuple[Any, ...], row: dict[str, int], group_by: str) -> dict[str, Any]:
    labels: dict[str, Callable[[], str]] = {
        "day": lambda: key[0].date().isoformat(),
        "model": lambda: f"{key[0]}:{key[1]}",
        "provider": lambda: key[0],
    }
    label = labels[group_by]()
    return _cache_row(label, row, row["storage"])


def spend_by_cache(*, tenant: Tenant, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """Per cache: request costs through it, its storage, and what it saved net of storage."""
    usage = (
        usage_list(tenant=tenant, since=since, until=until)
        .filter(cache_id__isnull=False)
        .values("cache_id")
        .annotate(
            requests=Count("id"),
            unpriced_requests=Count(
                "id", filter=Q(price_version__isnull=True, pool_price__isnull=True)
            ),
            cost_nanos=Sum("cost_nanos"),
            cost_without_cache_nanos=Sum("cost_without_cache_nanos"),
            prompt_tokens=Sum("prompt_tokens"),
            cached_read_tokens=Sum("cached_read_tokens"),
            output_tokens=Sum("output_tokens"),
            thinking_tokens=Sum("thinking_tokens"),
        )
    )
    storage = {
        r["cache_id"]: int(r["s"] or 0)
        for r in StorageAccrual.objects.filter(tenant=tenant, hour__gte=since, hour__lt=until)
        .values("cache_id")
        .annotate(s=Sum("cost_nanos"))
    }
    out = []
    for row in usage:
        cache_id = row["cache_id"]
        if cache_id is None:  # excluded by the filter above (this narrows the type)
            continue
        out.append(_cache_row(cache_id, row, storage.pop(cache_id, 0)))
    for stored_id, micros in storage.items():
        out.append(_cache_row(stored_id, {}, micros))
    return sorted(out, key=lambda r: r["key"])


def _cache_row(cache_id: str, row: Mapping[str, Any], storage_nanos: int) -> dict[str, Any]:
    """One group's figures: every µ$ figure is its exact nano total rounded once."""
    request_cost = int(row.get("cost_nanos") or 0)
    without = int(row.get("cost_without_cache_nanos") or 0)
    unpriced = int(row.get("unpriced_requests") or 0)
    return {
        "key": cache_id,
        "requests": int(row.get("requests") or 0),
        "unpriced_requests": unpriced,
        "prompt_tokens": int(row.get("prompt_tokens") or 0),
        "cached_read_tokens": int(row.get("cached_read_tokens") or 0),
        "output_tokens": int(row.get("output_tokens") or 0),
        "thinking_tokens": int(row.get("thinking_tokens") or 0),
        "request_cost_micros": nanos_to_micros(request_cost),
        "storage_cost_micros": nanos_to_micros(storage_nanos),
        "spent_micros": nanos_to_micros(request_cost + storage_nanos),
        "spent_nanos": request_cost + storage_nanos,
        "cost_without_cache_micros": nanos_to_micros(without),
        "saved_micros": nanos_to_micros(without - request_cost - storage_nanos),
    }


@dataclass(frozen=True)
class Savings:
    """Saved against spent for a tenant over a range (all integer micro-USD)."""

    spent_micros: int
    request_cost_micros: int
    storage_cost_micros: int
    cost_without_cache_micros: int
    saved_micros: int
    requests: int
    hit_ratio: Decimal
    spent_nanos: int = 0
    unpriced_requests: int = 0


def savings_summary(*, tenant: Tenant, since: datetime, until: datetime) -> Savings:
    """What caching saved the tenant: cost without cache minus (request cost + storage).

    ``hit_ratio`` is cached prompt tokens over all prompt tokens.
    """
    rollups = _rollups_in_range(tenant_id=tenant.pk, since=since, until=until).aggregate(
        cost=Coalesce(Sum("cost_nanos"), 0),
        without=Coalesce(Sum("cost_without_cache_nanos"), 0),
        requests=Coalesce(Sum("requests"), 0),
        unpriced=Coalesce(Sum("unpriced_requests"), 0),
        prompt=Coalesce(Sum("prompt_tokens"), 0),
        cached=Coalesce(Sum("cached_read_tokens"), 0),
    )
    storage = _sum(
        StorageAccrual.objects.filter(tenant=tenant, hour__gte=since, hour__lt=until),
        "cost_nanos",
    )
    cost, without = int(rollups["cost"]), int(rollups["without"])
    prompt = int(rollups["prompt"])
    ratio = (
        (Decimal(int(rollups["cached"])) / prompt).quantize(Decimal("0.0001"))
        if prompt
        else Decimal(0)
    )
    return Savings(
        spent_micros=nanos_to_micros(cost + storage),
        request_cost_micros=nanos_to_micros(cost),
        storage_cost_micros=nanos_to_micros(storage),
        cost_without_cache_micros=nanos_to_micros(without),
        saved_micros=nanos_to_micros(without - cost - storage),
        requests=int(rollups["requests"]),
        hit_ratio=ratio,
        spent_nanos=cost + storage,
        unpriced_requests=int(rollups["unpriced"]),
    )
