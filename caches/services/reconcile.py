"""Reconciliation: make our records agree with what providers really hold.

Per Vertex scope (project, location):
- a recorded live cache whose remote is gone becomes ``expired``;
- a remote cache with our display-name prefix that no live record claims is an orphan:
  adopted when a record is still creating it (its worker died after the remote call);
  deleted, with an audit row and its storage booked up to the deletion, when its record
  has ended (a create superseded by an eviction; ``CACHEPLANE_RECONCILE_ORPHANS=ended``,
  the default); reported when no record names it (``delete`` deletes those too,
  ``report`` deletes nothing);
- drift (each kind of disagreement) is counted in a ``ReconcileRun`` row and logged.
Operations whose lease lapsed (their worker died) are re-enqueued.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from caches.models import (
    TERMINAL_STATES,
    CacheObject,
    CacheOperation,
    CacheState,
    OperationKind,
    OperationStatus,
    Provider,
    ReconcileRun,
)
from caches.providers.vertex import VertexProvider, VertexScope
from caches.services.execution import operation_apply_success, operation_finish
from caches.services.lifecycle import operation_enqueue
from caches.services.locks import cache_lock
from caches.services.orphans import orphan_delete, orphan_of_ended_cache
from caches.services.transitions import cache_transition
from tenants.actor import Actor

logger = logging.getLogger(__name__)
RECONCILER = Actor.system("reconciler")


def vertex_scopes_all_tenants() -> list[tuple[str, str]]:
    """Every (project, location) holding a live Vertex cache, plus the default scope.

    Cross-tenant on purpose: reconciliation compares whole provider scopes.
    """
    scopes = set(
        # all_tenants: reconciliation compares every tenant's rows with the provider
        CacheObject.objects.all_tenants()
        .filter(provider=Provider.VERTEX)
        .exclude(state__in=[CacheState.EXPIRED, CacheState.EVICTED, CacheState.FAILED])
        .values_list("vertex_project", "vertex_location")
        .distinct()
    )
    if settings.CACHEPLANE_VERTEX_PROJECT:
        scopes.add((settings.CACHEPLANE_VERTEX_PROJECT, settings.CACHEPLANE_VERTEX_LOCATION))
    return sorted(s for s in scopes if s[0])


def _scope_credentials(project: str) -> str:
    from caches.models import TenantCacheSettings

    # all_tenants: reconciliation compares every tenant's rows with the provider
    own = TenantCacheSettings.objects.all_tenants().filter(vertex_project=project).first()
    return own.vertex_credentials_file if own else ""


def _cache_id_from(display_name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(display_name[len(settings.CACHEPLANE_VERTEX_DISPLAY_PREFIX) :])
    except ValueError:
        return None


def reconcile_vertex_scope(*, project: str, location: str) -> ReconcileRun:
    """Reconcile one Vertex scope; returns the run with its drift counts.

    The records are read *before* the remote caches are listed: a record seen live then
    had its remote before the listing started, so missing from the listing means gone.
    (Listing first took a create finishing in between for a cache whose remote vanished:
    it was marked expired and its remote left an orphan.) A remote with no record in that
    read is looked up again before it is called an orphan.
    """
    provider = VertexProvider(VertexScope(project, location, _scope_credentials(project)))
    run = ReconcileRun.objects.create(scope=f"vertex:{project}/{location}")
    # all_tenants: reconciliation compares every tenant's rows with the provider
    records = list(
        CacheObject.objects.all_tenants()
        .filter(provider=Provider.VERTEX, vertex_project=project, vertex_location=location)
        .filter(state__in=_LIVE)
        .only("pk", "state", "tenant_id")
    )
    remote = {listing.display_name: listing for listing in provider.list_ours()}
    claimed: set[str] = set()
    for cache in records:
        run.checked += 1
        name = f"{settings.CACHEPLANE_VERTEX_DISPLAY_PREFIX}{cache.pk}"
        listing = remote.get(name)
        if listing is not None:
            claimed.add(name)
            if cache.state == CacheState.CREATING:
                run.adopted += _adopt(cache, provider)
            continue
        if cache.state in (CacheState.ACTIVE, CacheState.REFRESHING):
            run.expired += _expire(cache, "remote cache is gone")
    for name, listing in remote.items():
        if name not in claimed:
            _orphan(run, provider, name, listing.remote_name)
    run.finished_at = timezone.now()
    run.save()
    if run.expired or run.adopted or run.errors:
        logger.warning(
            "vertex drift",
            extra={
                "scope": run.scope,
                "expired": run.expired,
                "adopted": run.adopted,
                "orphans": len(run.errors),
            },
        )
    return run


_LIVE = (CacheState.ACTIVE, CacheState.REFRESHING, CacheState.CREATING, CacheState.PENDING)


def _orphan(run: ReconcileRun, provider: VertexProvider, name: str, remote_name: str) -> None:
    """A listed remote that no record read before the listing claimed.

    Its record (looked up now) may be creating it (adopted), may have become live since
    (left alone: the next run checks it), or may have ended (a superseded create: deleted
    by default, with an audit row). A remote with our prefix and no record at all is
    reported, and deleted only under ``CACHEPLANE_RECONCILE_ORPHANS=delete``.
    """
    cache_id = _cache_id_from(name)
    # all_tenants: reconciliation compares every tenant's rows with the provider
    record = CacheObject.objects.all_tenants().filter(pk=cache_id).first() if cache_id else None
    if record is not None and record.state in (CacheState.CREATING, CacheState.PENDING):
        run.adopted += _adopt(record, provider)
        return
    if record is not None and record.state not in TERMINAL_STATES:
        if record.remote_name in ("", remote_name):
            return  # became live after the records were read
    policy = settings.CACHEPLANE_RECONCILE_ORPHANS
    run.errors.append({"orphan": remote_name, "display_name": name})
    ended = orphan_of_ended_cache(record, remote_name)
    if policy == "delete" or (policy == "ended" and ended):
        deleted = orphan_delete(
            provider=provider,
            remote_name=remote_name,
            cache=record,
            actor=RECONCILER,
            reason="reconciliation: no live record claims it",
        )
        run.deleted_orphans += int(deleted)


def _expire(cache: CacheObject, reason: str) -> int:
    with transaction.atomic():
        # Lock order (caches.services.locks): the cache, then its open operations.
        locked = cache_lock(cache_id=cache.pk)
        if locked.state not in (CacheState.ACTIVE, CacheState.REFRESHING):
            return 0
        open_ops = list(
            locked.operations.select_for_update(no_key=True)
            .filter(status__in=[OperationStatus.PENDING, OperationStatus.RUNNING])
            .order_by("pk")
        )
        cache_transition(cache=locked, to_state=CacheState.EXPIRED, actor=RECONCILER, reason=reason)
        for op in open_ops:
            operation_finish(op, OperationStatus.FAILED, "remote_gone", reason)
    return 1


def _adopt(cache: CacheObject, provider: VertexProvider) -> int:
    """A create whose worker died after the remote call: take the remote cache as ours."""
    found = provider.find(cache)
    if found is None:
        return 0
    with transaction.atomic():
        # Lock order (caches.services.locks): the cache, then its create operation.
        locked = cache_lock(cache_id=cache.pk)
        op = (
            # all_tenants: reconciliation compares every tenant's rows with the provider
            CacheOperation.objects.all_tenants()
            .select_for_update(no_key=True)
            .filter(
                cache=locked,
                kind=OperationKind.CREATE,
                status__in=[OperationStatus.PENDING, OperationStatus.RUNNING],
            )
            .first()
        )
        if op is None or locked.state not in (CacheState.PENDING, CacheState.CREATING):
            return 0
        op.cache = locked
        if locked.state == CacheState.PENDING:
            cache_transition(
                cache=locked,
                to_state=CacheState.CREATING,
                actor=RECONCILER,
                reason="adopting the remote cache",
            )
        op.status = OperationStatus.RUNNING
        op.save(update_fields=["status"])
        operation_apply_success(op, found)
    return 1


def operations_requeue_stuck(*, now: datetime | None = None) -> int:
    """Re-enqueue open operations whose lease lapsed or that never started."""
    now = now or timezone.now()
    stale_pending = now - timedelta(seconds=settings.CACHEPLANE_OPERATION_LEASE_SECONDS)
    # all_tenants: reconciliation compares every tenant's rows with the provider
    stuck = (
        CacheOperation.objects.all_tenants()
        .filter(
            Q(status=OperationStatus.RUNNING, lease_until__lt=now)
            | Q(
                status=OperationStatus.PENDING,
                lease_until__isnull=True,
                created_at__lt=stale_pending,
            )
        )
        .order_by("created_at")[: settings.CACHEPLANE_SWEEP_BATCH]
    )
    count = 0
    for op in stuck:
        with transaction.atomic():
            operation_enqueue(op)
        count += 1
    return count
