"""Storage accrual of live caches, for billing (one row per cache per clock hour).

Run every few minutes by beat: each live cache accrues from the later of its activation
and the current hour's start up to now; an ended cache accrues up to its end. Billing
makes repeated and overlapping intervals idempotent, so running this twice, or after a
crash mid-way, never charges a second twice.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from billing.errors import PriceNotFound
from billing.services.storage import hour_floor, storage_accrue
from caches.models import CacheObject, CacheState

logger = logging.getLogger(__name__)
LOOKBACK = timedelta(hours=2)  # covers a missed run or two without rescanning history


def cache_storage_accrue_recent(*, now=None, limit: int = 5000) -> int:
    """Accrue storage for caches that were live during the last LOOKBACK; returns rows."""
    now = now or timezone.now()
    since = now - LOOKBACK
    caches = (
        # all_tenants: the storage accrual sweep covers every tenant
        CacheObject.objects.all_tenants()
        .select_related("tenant")
        .filter(activated_at__isnull=False, token_count__isnull=False)
        .filter(
            Q(state__in=[CacheState.ACTIVE, CacheState.REFRESHING, CacheState.EVICTING])
            | Q(ended_at__gte=since)
        )
        .order_by("tenant_id", "activated_at")[:limit]
    )
    rows = 0
    for cache in caches:
        start = max(cache.activated_at, hour_floor(since))
        end = min(cache.ended_at or now, now)
        if end <= start:
            continue
        try:
            rows += len(
                storage_accrue(
                    tenant=cache.tenant,
                    cache_id=str(cache.pk),
                    provider=cache.provider,
                    model=cache.model,
                    tokens=int(cache.token_count),
                    start=start,
                    end=end,
                )
            )
        except PriceNotFound:
            logger.info("no storage price", extra={"cache": str(cache.pk), "model": cache.model})
    return rows
