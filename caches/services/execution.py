"""Carrying out cache operations against providers (called by the Celery task).

An attempt claims the operation (status running, a lease, attempt count) in one short
transaction, calls the provider outside any transaction, then records the result in a
second one. Running it twice is safe: a finished operation is a no-op, a running one
with a live lease belongs to someone else, and provider calls are idempotent (Vertex
creation adopts the remote cache carrying our display name; vLLM warming is a request).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from caches.models import (
    CacheObject,
    CacheOperation,
    CacheState,
    OperationKind,
    OperationStatus,
    Provider,
    TtlPolicy,
)
from caches.providers.base import (
    ProviderError,
    RemoteState,
    TransientProviderError,
)
from caches.providers.registry import provider_for
from caches.services.lifecycle import next_cron_time
from caches.services.transitions import cache_transition
from tenants.actor import Actor

logger = logging.getLogger(__name__)

OPEN = (OperationStatus.PENDING, OperationStatus.RUNNING)
SYSTEM = Actor.system("cache-operations")


def _claim(operation_id: str) -> CacheOperation | None:
    """Mark the operation running under a lease; None when there is nothing to do."""
    now = timezone.now()
    with transaction.atomic():
        op = (
            # all_tenants: the executor works on an operation row by id; tenant is on the row
            CacheOperation.objects.all_tenants()
            .select_for_update(skip_locked=True)
            .select_related("cache", "cache__tenant")
            .filter(pk=operation_id)
            .first()
        )
        if op is None or op.status not in OPEN:
            return None
        if op.status == OperationStatus.RUNNING and op.lease_until and op.lease_until > now:
            return None  # another worker holds it
        if op.attempts >= settings.CACHEPLANE_OPERATION_MAX_ATTEMPTS:
            _fail(op, "attempts_exhausted", f"gave up after {op.attempts} attempts: {op.error}")
            return None
        # all_tenants: the executor works on an operation row by id; tenant is on the row
        cache = CacheObject.objects.all_tenants().select_for_update().get(pk=op.cache_id)
        if op.kind == OperationKind.CREATE:
            if cache.state == CacheState.PENDING:
                cache_transition(
                    cache=cache,
                    to_state=CacheState.CREATING,
                    actor=SYSTEM,
                    reason=f"operation {op.pk}",
                )
            elif cache.state != CacheState.CREATING:
                operation_finish(
                    op, OperationStatus.FAILED, "invalid_state", f"cache is {cache.state}"
                )
                return None
        elif op.kind == OperationKind.REFRESH:
            if cache.state == CacheState.ACTIVE:
                cache_transition(
                    cache=cache,
                    to_state=CacheState.REFRESHING,
                    actor=SYSTEM,
                    reason=op.params.get("reason", "refresh"),
                )
            elif cache.state != CacheState.REFRESHING:
                operation_finish(
                    op, OperationStatus.FAILED, "invalid_state", f"cache is {cache.state}"
                )
                return None
        op.status = OperationStatus.RUNNING
        op.attempts += 1
        op.started_at = op.started_at or now
        op.lease_until = now + timedelta(seconds=settings.CACHEPLANE_OPERATION_LEASE_SECONDS)
        op.save(update_fields=["status", "attempts", "started_at", "lease_until"])
        op.cache = cache
        return op


def operation_finish(op: CacheOperation, status: str, code: str = "", error: str = "") -> None:
    """Close an operation (locked by the caller) with its final status and error."""
    op.status = status
    op.error_code = code
    op.error = error[:2000]
    op.finished_at = timezone.now()
    op.lease_until = None
    op.save(update_fields=["status", "error_code", "error", "finished_at", "lease_until"])


def _fail(op: CacheOperation, code: str, message: str) -> None:
    operation_finish(op, OperationStatus.FAILED, code, message)
    # all_tenants: the executor works on an operation row by id; tenant is on the row
    cache = (
        CacheObject.objects.all_tenants()
        .select_for_update()
        .select_related("tenant")
        .get(pk=op.cache_id)
    )
    cache.last_error, cache.last_error_code = message[:2000], code
    if op.kind == OperationKind.CREATE and cache.state in (CacheState.PENDING, CacheState.CREATING):
        cache_transition(
            cache=cache,
            to_state=CacheState.FAILED,
            actor=SYSTEM,
            reason=message,
            extra_fields=("last_error", "last_error_code"),
        )
    elif op.kind == OperationKind.REFRESH and cache.state == CacheState.REFRESHING:
        to_state = CacheState.EXPIRED if code == "remote_gone" else CacheState.ACTIVE
        cache_transition(
            cache=cache,
            to_state=to_state,
            actor=SYSTEM,
            reason=message,
            extra_fields=("last_error", "last_error_code"),
        )
    else:
        cache.save(update_fields=["last_error", "last_error_code", "updated_at"])


def operation_execute(*, operation_id: str) -> str | None:
    """Run one attempt; returns the final status, or None when it was not ours to run.

    Raises TransientProviderError after releasing the lease, so the task retries with
    backoff; permanent errors fail the operation (and a create fails its cache).
    """
    op = _claim(operation_id)
    if op is None:
        return None
    provider = provider_for(op.cache)
    try:
        if op.kind == OperationKind.CREATE:
            remote = provider.create(op.cache)
        elif op.kind == OperationKind.REFRESH:
            ttl = int(op.params.get("ttl_seconds") or op.cache.ttl_seconds)
            remote = provider.refresh(op.cache, ttl_seconds=ttl)
        else:
            provider.evict(op.cache)
            remote = RemoteState()
    except TransientProviderError as exc:
        with transaction.atomic():
            # all_tenants: the executor works on an operation row by id; tenant is on the row
            locked = CacheOperation.objects.all_tenants().select_for_update().get(pk=op.pk)
            locked.status, locked.lease_until = OperationStatus.PENDING, None
            locked.error, locked.error_code = str(exc)[:2000], exc.code
            locked.save(update_fields=["status", "lease_until", "error", "error_code"])
        raise
    except ProviderError as exc:  # permanent (transient ones were handled above)
        with transaction.atomic():
            # all_tenants: the executor works on an operation row by id; tenant is on the row
            _fail(
                CacheOperation.objects.all_tenants().select_for_update().get(pk=op.pk),
                exc.code,
                str(exc),
            )
        return OperationStatus.FAILED
    with transaction.atomic():
        # all_tenants: the executor works on an operation row by id; tenant is on the row
        locked = CacheOperation.objects.all_tenants().select_for_update().get(pk=op.pk)
        if locked.status != OperationStatus.RUNNING:
            return locked.status  # reconciliation settled it meanwhile
        operation_apply_success(locked, remote)
    return OperationStatus.SUCCEEDED


def operation_apply_success(op: CacheOperation, remote: RemoteState) -> None:
    """Record what the provider reported and move the cache to its next state."""
    # all_tenants: the executor works on an operation row by id; tenant is on the row
    cache = (
        CacheObject.objects.all_tenants()
        .select_for_update()
        .select_related("tenant")
        .get(pk=op.cache_id)
    )
    now = timezone.now()
    fields: list[str] = []
    if op.kind in (OperationKind.CREATE, OperationKind.REFRESH):
        ttl = int(op.params.get("ttl_seconds") or cache.ttl_seconds)
        if remote.remote_name:
            cache.remote_name = remote.remote_name
        if remote.token_count is not None:
            cache.token_count = remote.token_count
        if remote.placement:
            cache.placement = remote.placement
        cache.ttl_seconds = ttl
        cache.expire_at = remote.expire_at or (now + timedelta(seconds=ttl))
        cache.last_error, cache.last_error_code = "", ""
        cache.next_refresh_at = next_refresh_time(cache, now)
        if cache.prewarm_cron and (cache.next_prewarm_at is None or cache.next_prewarm_at <= now):
            cache.next_prewarm_at = next_cron_time(cache.prewarm_cron, now)
        fields = [
            "remote_name",
            "token_count",
            "placement",
            "ttl_seconds",
            "expire_at",
            "last_error",
            "last_error_code",
            "next_refresh_at",
            "next_prewarm_at",
        ]
        if op.kind == OperationKind.CREATE:
            cache.activated_at = now
            fields.append("activated_at")
        reason = f"{op.kind} succeeded"
        if remote.cached_tokens is not None:
            reason += f" (resident: {remote.cached_tokens} cached tokens)"
        cache_transition(
            cache=cache,
            to_state=CacheState.ACTIVE,
            actor=SYSTEM,
            reason=reason,
            extra_fields=tuple(fields),
        )
    else:
        cache_transition(cache=cache, to_state=CacheState.EVICTED, actor=SYSTEM, reason="evicted")
    operation_finish(op, OperationStatus.SUCCEEDED)


def next_refresh_time(cache: CacheObject, now):
    """When the scheduler should look at this cache again.

    vLLM caches are re-probed every pin interval (keeping blocks recently used so LRU
    keeps them); sliding and economic Vertex caches are reviewed when 80 % of the TTL has
    passed, so an extension lands before expiry; fixed Vertex caches need no review.
    """
    if cache.provider == Provider.VLLM:
        return now + timedelta(seconds=settings.CACHEPLANE_VLLM_PIN_REFRESH_SECONDS)
    if cache.ttl_policy in (TtlPolicy.SLIDING, TtlPolicy.ECONOMIC):
        return now + timedelta(seconds=cache.ttl_seconds * 0.8)
    return None
