"""Storage accrual of live caches, for billing (one row per cache per clock hour).

Run every few minutes by beat: each live cache accrues from the later of its activation
and the lookback window's start up to now; an ended cache accrues up to its end. Billing
makes repeated and overlapping intervals idempotent, so running this twice, or after a
crash mid-way, never charges a second twice. The scan walks *every* qualifying cache in
keyset-paginated batches (a fleet larger than one batch is charged in full), and a cache
that ends accrues its last seconds before its storage hold is settled
(:func:`cache_storage_accrue_final`).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from billing.errors import PriceNotFound
from billing.services.storage import hour_floor, storage_accrue
from caches.models import CacheObject, CacheState

logger = logging.getLogger(__name__)
LOOKBACK = timedelta(hours=2)  # covers a missed run or two without rescanning history
BATCH = 5000
#: The columns the sweep loads per cache (and the tenant row, joined).
ACCRUAL_FIELDS = (
    "id",
    "tenant",
    "provider",
    "model",
    "token_count",
    "activated_at",
    "ended_at",
    "expire_at",
    "pool",  # vLLM: the pool holding the prefix, whose GPU price prices its blocks
)


def storage_end(cache: CacheObject, now: datetime) -> datetime:
    """When the cache stopped costing storage: its end, or its expiry when that came
    first (the provider drops an expired cache then, not when our sweeper notices)."""
    ends = [moment for moment in (cache.ended_at, cache.expire_at) if moment is not None]
    return min([*ends, now])


def _accrue_one(cache: CacheObject, *, start: datetime, end: datetime) -> int:
    if end <= start or cache.token_count is None:  # the sweep selects counted caches only
        return 0
    try:
        return len(
            storage_accrue(
                tenant=cache.tenant,
                cache_id=str(cache.pk),
                provider=cache.provider,
                model=cache.model,
                tokens=int(cache.token_count),
                start=start,
                end=end,
                pool=cache.pool,
            )
        )
    except PriceNotFound:
        logger.warning(
            "unpriced cache storage", extra={"cache": str(cache.pk), "model": cache.model}
        )
        return 0


def cache_storage_accrue_recent(
    *, now: datetime | None = None, limit: int = BATCH, max_batches: int | None = None
) -> int:
    """Accrue storage for every cache live during the last LOOKBACK; returns rows written.

    Batches of ``limit`` caches ordered by id (keyset pagination: each batch starts after
    the last id of the previous one), so every cache is reached whatever the fleet size;
    ``max_batches`` bounds one run when a caller wants to fan out.
    """
    now = now or timezone.now()
    since = now - LOOKBACK
    qs = (
        # all_tenants: the storage accrual sweep covers every tenant
        CacheObject.objects.all_tenants()
        .select_related("tenant")
        .filter(activated_at__isnull=False, token_count__isnull=False)
        .filter(
            Q(state__in=[CacheState.ACTIVE, CacheState.REFRESHING, CacheState.EVICTING])
            | Q(ended_at__gte=since)
        )
        # Only what an accrual reads: a batch of full rows carried every cache's content
        # (up to CACHEPLANE_CACHE_MAX_CONTENT_BYTES each) into memory for nothing.
        .only(*ACCRUAL_FIELDS)
        .order_by("pk")
    )
    rows, last_pk, batches = 0, None, 0
    while max_batches is None or batches < max_batches:
        page = qs if last_pk is None else qs.filter(pk__gt=last_pk)
        caches = list(page[:limit])
        if not caches:
            break
        batches += 1
        last_pk = caches[-1].pk
        for cache in caches:
            if cache.activated_at is None:  # the query selects activated caches only
                continue
            start = max(cache.activated_at, hour_floor(since))
            end = storage_end(cache, now)
            rows += _accrue_one(cache, start=start, end=end)
        if len(caches) < limit:
            break
    return rows


def cache_storage_accrue_final(*, cache: CacheObject) -> int:
    """Accrue a cache's storage up to the second it ended (before its hold is settled).

    Covers the whole life not yet accrued (from activation; already covered seconds are
    idempotent), so the settled figure is everything the cache cost, to the last second.
    """
    if cache.activated_at is None or cache.token_count is None:
        return 0
    return _accrue_one(cache, start=cache.activated_at, end=storage_end(cache, timezone.now()))
