"""Time-driven work: expiring due caches and scheduling refreshes and pre-warms.

Each function reads only due rows through a partial index (``expire_at`` /
``next_refresh_at`` / ``next_prewarm_at`` of live caches), locks a bounded batch with
``SKIP LOCKED`` (so two beat runs never fight over rows), and returns how many it
handled; the tasks re-enqueue themselves while full batches keep coming.

Economic caches are run by the TTL autopilot (``billing.ttl_policy.autopilot_decide``,
the function ``bench/ttl_policy.py`` measures): each review sets the expiry to the last
query plus the keep-alive learned for the content (a refresh with that TTL, which may
lengthen or shorten it), or lets the cache run out; near a budget limit it shortens and
stops refreshing, over it drops the cache at the next review.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from caches.cron import next_cron_time
from caches.models import CacheObject, CacheOperation, CacheState, OperationKind, TtlPolicy
from caches.services.lifecycle import operation_enqueue
from caches.services.transitions import cache_transition
from tenants.actor import Actor
from tenants.models import TenantState

SCHEDULER = Actor.system("cache-scheduler")


def cache_expire_due(*, now: datetime | None = None, limit: int | None = None) -> int:
    """Mark live caches past their expiry as expired; returns how many.

    One transaction per cache (the lock order of ``caches.services.locks``): expiring a
    cache settles its storage hold (budgets, periods, alerts) and appends to its tenant's
    audit chain, whose head is held until commit. Expiring a batch in one transaction
    would hold one tenant's head while waiting for the next cache's budget periods, and
    lock periods of several tenants in expiry order: both deadlocked against budget
    edits and the hold flush (issue 29). A cache another transaction holds is skipped
    (``SKIP LOCKED``) and picked up by the next run.
    """
    now = now or timezone.now()
    limit = limit or settings.CACHEPLANE_SWEEP_BATCH
    due_filter = Q(state__in=[CacheState.ACTIVE, CacheState.REFRESHING], expire_at__lte=now)
    due_ids = list(
        # all_tenants: the scheduler sweeps every tenant's due caches
        CacheObject.objects.all_tenants()
        .filter(due_filter)
        .order_by("expire_at")
        .values_list("pk", flat=True)[:limit]
    )
    expired = 0
    for cache_id in due_ids:
        with transaction.atomic():
            cache = (
                # all_tenants: the scheduler sweeps every tenant's due caches
                CacheObject.objects.all_tenants()
                .select_for_update(skip_locked=True, no_key=True, of=("self",))
                .select_related("tenant")
                .filter(due_filter, pk=cache_id)
                .first()
            )
            if cache is None:  # held elsewhere, or no longer due: the next run decides
                continue
            # Vertex garbage-collects expired caches itself; vLLM blocks simply stop being
            # pinned. Either way the record is now the truth: expired.
            cache_transition(
                cache=cache, to_state=CacheState.EXPIRED, actor=SCHEDULER, reason="TTL elapsed"
            )
            expired += 1
    return expired


def _wants_extension(cache: CacheObject, now: datetime) -> bool:
    """Sliding (and economic caches the autopilot cannot price: without prices there is no
    economic answer, so they slide): used within the last TTL."""
    if cache.ttl_policy in (TtlPolicy.SLIDING, TtlPolicy.ECONOMIC):
        return cache.last_hit_at is not None and (
            (now - cache.last_hit_at).total_seconds() < cache.ttl_seconds
        )
    return cache.provider == "vllm"  # fixed vLLM caches stay pinned until expiry


def cache_enqueue_due_refreshes(*, now: datetime | None = None, limit: int | None = None) -> int:
    """Create refresh operations for caches whose review or pre-warm time has come."""
    now = now or timezone.now()
    limit = limit or settings.CACHEPLANE_SWEEP_BATCH
    handled = 0
    with transaction.atomic():
        due = list(
            # all_tenants: the scheduler sweeps every tenant's due caches
            CacheObject.objects.all_tenants()
            .select_for_update(skip_locked=True, of=("self",))
            .select_related("tenant")
            .filter(state=CacheState.ACTIVE)
            .filter(Q(next_refresh_at__lte=now) | Q(next_prewarm_at__lte=now))
            .order_by("next_refresh_at")[:limit]
        )
        for cache in due:
            handled += 1
            prewarm = cache.next_prewarm_at is not None and cache.next_prewarm_at <= now
            if cache.tenant.state != TenantState.ACTIVE:
                # Suspended tenants' caches stop refreshing; they expire on schedule.
                cache.next_refresh_at, cache.next_prewarm_at = None, None
                cache.save(update_fields=["next_refresh_at", "next_prewarm_at", "updated_at"])
                continue
            if cache.ttl_policy == TtlPolicy.ECONOMIC and not prewarm:
                if _autopilot_review(cache, now):
                    continue
            extend = _wants_extension(cache, now)
            if prewarm:
                cache.next_prewarm_at = next_cron_time(cache.prewarm_cron, now)
            cache.next_refresh_at = None  # set again when the refresh succeeds
            cache.save(update_fields=["next_refresh_at", "next_prewarm_at", "updated_at"])
            if not (extend or prewarm):
                continue  # left to expire at expire_at
            reason = "pre-warm" if prewarm else "scheduled refresh"
            operation = CacheOperation.objects.create(
                tenant_id=cache.tenant_id,
                cache=cache,
                kind=OperationKind.REFRESH,
                params={"ttl_seconds": cache.ttl_seconds, "reason": reason},
            )
            operation_enqueue(operation)
    return handled


def _autopilot_review(cache: CacheObject, now: datetime) -> bool:
    """Apply the autopilot's decision to a due economic cache; False when it is unpriced
    (it then slides, see ``_wants_extension``)."""
    from billing import ttl_policy
    from billing.services.cache_economics import cache_autopilot_decision

    decision = cache_autopilot_decision(cache=cache, now=now)
    if decision is None:
        return False
    ttl = ttl_policy.autopilot_review_ttl(
        decision,
        now=now.timestamp(),
        expire_at=cache.expire_at.timestamp() if cache.expire_at is not None else None,
    )
    if ttl is not None:
        cache.next_refresh_at = None  # set again when the refresh succeeds
        cache.save(update_fields=["next_refresh_at", "updated_at"])
        operation = CacheOperation.objects.create(
            tenant_id=cache.tenant_id,
            cache=cache,
            kind=OperationKind.REFRESH,
            params={"ttl_seconds": ttl, "reason": f"autopilot: {decision.reason}"},
        )
        operation_enqueue(operation)
        return True
    review = decision.next_review_at
    cache.next_refresh_at = (
        datetime.fromtimestamp(review, tz=now.tzinfo) if review is not None else None
    )
    cache.save(update_fields=["next_refresh_at", "updated_at"])
    return True
