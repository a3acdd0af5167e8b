"""Reading usage and spend: ledger rows, rollups, storage, savings, exports, quotes.

Every tenant-owned read takes the tenant explicitly. Spend = request costs (ledger or
rollups) + storage accruals.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDay

from billing.errors import PriceNotFound
from billing.models import (
    Granularity,
    Provider,
    StorageAccrual,
    UsageRecord,
    UsageRollup,
)
from billing.pricing import Cost, UsageCounts, gpu_cost, line_micros, token_cost
from billing.selectors.prices import (
    model_price_resolve,
    pool_price_resolve,
    pool_rates,
    token_rates,
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


def _sum(qs: QuerySet, field: str) -> int:
    return int(qs.aggregate(v=Coalesce(Sum(field), 0))["v"])


def _day_ceil(moment: datetime) -> datetime:
    floor = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return floor if floor == moment else floor + DAY


def tenant_spend_micros(
    *, tenant_id: object, since: datetime, until: datetime, principal_id: object = None
) -> int:
    """What the tenant (or one principal) spent in [since, until): requests + storage.

    Tenant-wide: whole days from day rollups, the ragged edges from minute rollups (cheap
    at any volume). Per principal: the ledger (rollups carry no principal); storage is
    charged to the tenant, not to a principal.
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
            "cost_micros",
        )
    requests = _sum(_rollups_in_range(tenant_id=tenant_id, since=since, until=until), "cost_micros")
    storage = _sum(
        StorageAccrual.objects.filter(tenant_id=tenant_id, hour__gte=since, hour__lt=until),
        "cost_micros",
    )
    return requests + storage


GROUPS = ("day", "model", "provider", "cache")


_SUMS = (
    "requests",
    "cost_micros",
    "cost_without_cache_micros",
    "prompt_tokens",
    "cached_read_tokens",
    "output_tokens",
)


def _rollups_in_range(*, tenant_id: object, since: datetime, until: datetime) -> QuerySet:
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


def spend_grouped(*, tenant: Tenant, since: datetime, until: datetime, group_by: str) -> list[dict]:
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
    totals: dict[tuple, dict] = {}
    for row in rollups.values(*keys).annotate(**{f: Sum(f) for f in _SUMS}):
        key = tuple(row[k] for k in keys)
        entry = totals.setdefault(key, {f: 0 for f in _SUMS} | {"storage": 0})
        for f in _SUMS:
            entry[f] += int(row[f] or 0)
    for row in storage.values(*keys).annotate(s=Sum("cost_micros")):
        key = tuple(row[k] for k in keys)
        totals.setdefault(key, {f: 0 for f in _SUMS} | {"storage": 0})["storage"] += int(row["s"])
    return [_group_row(key, totals[key], group_by) for key in sorted(totals)]


def _group_row(key: tuple, row: dict, group_by: str) -> dict:
    label = {
        "day": lambda: key[0].date().isoformat(),
        "model": lambda: f"{key[0]}:{key[1]}",
        "provider": lambda: key[0],
    }[group_by]()
    return _cache_row(label, row, row["storage"])


def spend_by_cache(*, tenant: Tenant, since: datetime, until: datetime) -> list[dict]:
    """Per cache: request costs through it, its storage, and what it saved net of storage."""
    usage = (
        usage_list(tenant=tenant, since=since, until=until)
        .filter(cache_id__isnull=False)
        .values("cache_id")
        .annotate(
            requests=Count("id"),
            cost_micros=Sum("cost_micros"),
            cost_without_cache_micros=Sum("cost_without_cache_micros"),
            prompt_tokens=Sum("prompt_tokens"),
            cached_read_tokens=Sum("cached_read_tokens"),
            output_tokens=Sum("output_tokens"),
        )
    )
    storage = {
        r["cache_id"]: int(r["s"] or 0)
        for r in StorageAccrual.objects.filter(tenant=tenant, hour__gte=since, hour__lt=until)
        .values("cache_id")
        .annotate(s=Sum("cost_micros"))
    }
    out = []
    for row in usage:
        out.append(_cache_row(row["cache_id"], row, storage.pop(row["cache_id"], 0)))
    for cache_id, micros in storage.items():
        out.append(_cache_row(cache_id, {}, micros))
    return sorted(out, key=lambda r: r["key"])


def _cache_row(cache_id: str, row: dict, storage_micros: int) -> dict:
    request_cost = int(row.get("cost_micros") or 0)
    without = int(row.get("cost_without_cache_micros") or 0)
    return {
        "key": cache_id,
        "requests": int(row.get("requests") or 0),
        "prompt_tokens": int(row.get("prompt_tokens") or 0),
        "cached_read_tokens": int(row.get("cached_read_tokens") or 0),
        "output_tokens": int(row.get("output_tokens") or 0),
        "request_cost_micros": request_cost,
        "storage_cost_micros": storage_micros,
        "spent_micros": request_cost + storage_micros,
        "cost_without_cache_micros": without,
        "saved_micros": without - request_cost - storage_micros,
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


def savings_summary(*, tenant: Tenant, since: datetime, until: datetime) -> Savings:
    """What caching saved the tenant: cost without cache minus (request cost + storage).

    ``hit_ratio`` is cached prompt tokens over all prompt tokens.
    """
    rollups = _rollups_in_range(tenant_id=tenant.pk, since=since, until=until).aggregate(
        cost=Coalesce(Sum("cost_micros"), 0),
        without=Coalesce(Sum("cost_without_cache_micros"), 0),
        requests=Coalesce(Sum("requests"), 0),
        prompt=Coalesce(Sum("prompt_tokens"), 0),
        cached=Coalesce(Sum("cached_read_tokens"), 0),
    )
    storage = _sum(
        StorageAccrual.objects.filter(tenant=tenant, hour__gte=since, hour__lt=until),
        "cost_micros",
    )
    cost, without = int(rollups["cost"]), int(rollups["without"])
    prompt = int(rollups["prompt"])
    ratio = (
        (Decimal(int(rollups["cached"])) / prompt).quantize(Decimal("0.0001"))
        if prompt
        else Decimal(0)
    )
    return Savings(
        spent_micros=cost + storage,
        request_cost_micros=cost,
        storage_cost_micros=storage,
        cost_without_cache_micros=without,
        saved_micros=without - cost - storage,
        requests=int(rollups["requests"]),
        hit_ratio=ratio,
    )


EXPORT_COLUMNS = (
    "kind",
    "occurred_at",
    "request_id",
    "provider",
    "model",
    "pool",
    "worker",
    "cache_id",
    "api_key_id",
    "status",
    "prompt_tokens",
    "cached_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "storage_seconds",
    "price_version",
    "cost_micros",
    "cost_without_cache_micros",
    "cost_usd",
)


def _usd(micros: int) -> str:
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{frac:06d}"


def spend_export_rows(*, tenant: Tenant, since: datetime, until: datetime) -> Iterator[list]:
    """Every ledger row and storage accrual in [since, until), in time order, for CSV.

    Streams with server-side cursors (``iterator``) so memory stays flat at any size.
    """
    records = (
        usage_list(tenant=tenant, since=since, until=until)
        .order_by("occurred_at", "id")
        .values_list(
            "occurred_at",
            "request_id",
            "provider",
            "model",
            "pool",
            "worker",
            "cache_id",
            "api_key_id",
            "status",
            "prompt_tokens",
            "cached_read_tokens",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "output_tokens",
            "price_version_id",
            "pool_price_id",
            "cost_micros",
            "cost_without_cache_micros",
        )
    )
    for r in records.iterator(chunk_size=2000):
        price = f"model:{r[14]}" if r[14] else (f"pool:{r[15]}" if r[15] else "")
        yield [
            "request",
            r[0].isoformat(),
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6] or "",
            r[7] or "",
            r[8],
            r[9],
            r[10],
            r[11],
            r[12],
            r[13],
            "",
            price,
            r[16],
            r[17],
            _usd(r[16]),
        ]
    accruals = (
        StorageAccrual.objects.filter(tenant=tenant, hour__gte=since, hour__lt=until)
        .annotate(seconds=F("covered_to") - F("covered_from"))
        .order_by("hour", "id")
        .values_list(
            "hour",
            "provider",
            "model",
            "pool",
            "cache_id",
            "seconds",
            "price_version_id",
            "pool_price_id",
            "cost_micros",
        )
    )
    for a in accruals.iterator(chunk_size=2000):
        price = f"model:{a[6]}" if a[6] else (f"pool:{a[7]}" if a[7] else "")
        yield [
            "storage",
            a[0].isoformat(),
            "",
            a[1],
            a[2],
            a[3],
            "",
            a[4],
            "",
            "ok",
            "",
            "",
            "",
            "",
            "",
            f"{a[5].total_seconds():.6f}",
            price,
            a[8],
            a[8],
            _usd(a[8]),
        ]


def usage_cost_quote(
    *, provider: str, model: str, counts: UsageCounts, at: datetime, pool: str = ""
) -> Cost:
    """The cost the flush will book for these counts at ``at`` (for ``budget_settle``).

    Raises PriceNotFound when no price covers it.
    """
    if provider == Provider.VLLM:
        pool_price = pool_price_resolve(pool=pool, at=at) if pool else None
        if pool_price is None:
            raise PriceNotFound(f"No GPU price for pool {pool!r}.")
        return gpu_cost(counts, pool_rates(pool_price))
    price = model_price_resolve(provider=provider, model=model, at=at)
    if price is None:
        raise PriceNotFound(f"No price for {provider}:{model}.")
    return token_cost(counts, token_rates(price))


def usage_estimate_micros(
    *,
    provider: str,
    model: str,
    prompt_tokens: int,
    max_output_tokens: int,
    at: datetime,
    pool: str = "",
) -> int:
    """An upper bound of a request's cost before it runs (for ``budget_reserve``): every
    prompt token at the dearest input-side rate of its tier, plus the maximum output."""
    if provider == Provider.VLLM:
        return usage_cost_quote(
            provider=provider,
            model=model,
            pool=pool,
            at=at,
            counts=UsageCounts(prompt_tokens=prompt_tokens, output_tokens=max_output_tokens),
        ).micros
    price = model_price_resolve(provider=provider, model=model, at=at)
    if price is None:
        raise PriceNotFound(f"No price for {provider}:{model}.")
    r = token_rates(price).for_prompt(prompt_tokens)
    dearest = max(r.input, r.cached_input, r.cache_write_5m, r.cache_write_1h)
    return line_micros(prompt_tokens, dearest) + line_micros(max_output_tokens, r.output)
