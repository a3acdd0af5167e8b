"""Cache storage accrual: per cache, per clock hour, prorated to the seconds it lived.

Vertex explicit caches pay storage per 1M tokens per hour; on self-hosted pools a pinned
prefix holds KV blocks, charged as block-hours at the pool's GPU price. The caches app
reports each live (or just evicted) cache's interval from a beat task; reporting the
same interval twice, or overlapping intervals, charges each second once. Costs are exact
nano-USD (``cost_nanos``; ``cost_micros`` is its rounding). When a cache's token count
changes within an hour, the seconds already covered keep the count they were accrued at
and only the rest of the hour is priced at the new count.

Booking: each accrual books the cost it adds (the difference between a row's new and
old cost) through the ledger's one booking path (``billing.services.ledger_booking``) at
the row's hour, so a budget counts storage as it accrues, each hour in the period it
falls in (a cache across a month boundary charges each month its own share). The cache's
storage hold (``cache:<id>``, taken at creation) shrinks by the same amount: it only
reserves what is still to come, and its final settle adds nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import Max

from billing.errors import InvalidRange, InvalidUsage, PriceNotFound
from billing.models import Provider, StorageAccrual
from billing.pricing import nanos_to_micros, storage_nanos
from billing.selectors.prices import (
    model_price_resolve,
    pool_price_resolve,
    pool_rates,
    token_rates,
)
from billing.services.ledger_booking import Booking, ledger_book, ledger_lock
from tenants.models import Tenant

HOUR = timedelta(hours=1)
MAX_ACCRUAL_SPAN = timedelta(days=31)


def hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _seconds(start: datetime, end: datetime) -> Decimal:
    delta = end - start
    return Decimal(delta.days * 86_400 + delta.seconds) + Decimal(delta.microseconds) / 10**6


def storage_cost_for(
    *, provider: str, model: str, pool: str, tokens: int, start: datetime, end: datetime
) -> tuple[int, int | None, int | None]:
    """(cost nanos, model price id, pool price id) of holding ``tokens`` over [start, end).

    The price is the one effective at ``start`` (an interval never spans more than one
    hour bucket here), at the storage rate of the tier the cached tokens fall into.
    Raises PriceNotFound when none covers it.
    """
    seconds = _seconds(start, end)
    if provider == Provider.VLLM:
        price = pool_price_resolve(pool=pool, at=start)
        if price is None:
            raise PriceNotFound(f"No GPU price for pool {pool!r} at {start.isoformat()}.")
        return pool_rates(price).kv_nanos(tokens=tokens, seconds=seconds), None, price.pk
    model_price = model_price_resolve(provider=provider, model=model, at=start)
    if model_price is None:
        raise PriceNotFound(f"No price for {provider}:{model} at {start.isoformat()}.")
    rate = token_rates(model_price).for_prompt(tokens).storage_per_hour
    nanos = storage_nanos(tokens=tokens, seconds=seconds, rate_per_mtok_hour=rate)
    return nanos, model_price.pk, None


_UPSERT_SQL = """
INSERT INTO billing_storageaccrual (tenant_id, cache_id, provider, model, pool, tokens, hour,
  covered_from, covered_to, price_version_id, pool_price_id, cost_micros, cost_nanos,
  updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0, now())
ON CONFLICT (tenant_id, cache_id, hour, tokens) DO UPDATE SET
  covered_from = LEAST(billing_storageaccrual.covered_from, EXCLUDED.covered_from),
  covered_to = GREATEST(billing_storageaccrual.covered_to, EXCLUDED.covered_to),
  updated_at = now()
RETURNING id, covered_from, covered_to
"""


def storage_accrue(
    *,
    tenant: Tenant,
    cache_id: str,
    provider: str,
    model: str,
    tokens: int,
    start: datetime,
    end: datetime,
    pool: str = "",
) -> list[StorageAccrual]:
    """Accrue storage of one cache over [start, end), one row per clock hour touched.

    Idempotent per (cache_id, hour): each row covers the union of the intervals reported
    for that hour (a cache lives one contiguous interval), and its cost is recomputed
    from the covered seconds, so repeating a call or reporting overlapping intervals
    never charges a second twice. Pass ``end`` = eviction time (or now) so nothing
    accrues after eviction. Raises InvalidRange, InvalidUsage, PriceNotFound.
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise InvalidRange("start and end must be timezone-aware.")
    if end < start or end - start > MAX_ACCRUAL_SPAN:
        raise InvalidRange("end must follow start, at most 31 days later.")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise InvalidUsage("tokens must be a non-negative integer.")
    if provider not in Provider.values or not cache_id or len(cache_id) > 100:
        raise InvalidUsage("Unknown provider or bad cache_id.")
    rows: list[StorageAccrual] = []
    bookings: list[Booking] = []
    with transaction.atomic():
        ledger_lock()
        bucket = hour_floor(start)
        while bucket < end:
            piece_from, piece_to = max(start, bucket), min(end, bucket + HOUR)
            # Seconds of this hour already accrued at another token count stay theirs.
            claimed = StorageAccrual.objects.filter(
                tenant=tenant, cache_id=cache_id, hour=bucket, covered_from__lt=piece_to
            ).exclude(tokens=tokens)
            claimed_to = claimed.aggregate(end=Max("covered_to"))["end"]
            if claimed_to is not None:
                piece_from = max(piece_from, claimed_to)
            if piece_from >= piece_to:
                bucket += HOUR
                continue
            with connection.cursor() as cursor:
                cursor.execute(
                    _UPSERT_SQL,
                    [
                        tenant.pk,
                        cache_id,
                        provider,
                        model,
                        pool,
                        tokens,
                        bucket,
                        piece_from,
                        piece_to,
                        None,
                        None,
                        0,
                    ],
                )
                row_id, covered_from, covered_to = cursor.fetchone()
            # all_tenants: the hourly accrual sweep writes rows of every tenant by id
            before = (
                StorageAccrual.objects.all_tenants()
                .filter(pk=row_id)
                .values_list("cost_nanos", flat=True)[0]
            )
            nanos, price_id, pool_price_id = storage_cost_for(
                provider=provider,
                model=model,
                pool=pool,
                tokens=tokens,
                start=covered_from,
                end=covered_to,
            )
            # all_tenants: the hourly accrual sweep writes rows of every tenant by id
            StorageAccrual.objects.all_tenants().filter(pk=row_id).update(
                cost_nanos=nanos,
                cost_micros=nanos_to_micros(nanos),
                price_version_id=price_id,
                pool_price_id=pool_price_id,
            )
            # all_tenants: the hourly accrual sweep writes rows of every tenant by id
            rows.append(StorageAccrual.objects.all_tenants().get(pk=row_id))
            if nanos != before:
                bookings.append(Booking(tenant_id=str(tenant.pk), at=bucket, nanos=nanos - before))
            bucket += HOUR
        ledger_book(entries=bookings)
        added = sum(b.nanos for b in bookings)
        if added > 0:
            from billing.services.budgets import budget_hold_consume

            budget_hold_consume(
                tenant_id=tenant.pk, request_id=f"cache:{cache_id}", micros=-(-added // 1000)
            )
    return rows


def storage_estimate_micros(
    *, provider: str, model: str, tokens: int, ttl: timedelta, at: datetime, pool: str = ""
) -> int:
    """Storage cost of keeping ``tokens`` for ``ttl`` at today's price, in µ$ rounded up
    (for reservations: a hold is never below what it covers)."""
    nanos = storage_cost_for(
        provider=provider, model=model, pool=pool, tokens=tokens, start=at, end=at + ttl
    )[0]
    return -(-nanos // 1000)
