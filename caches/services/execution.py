"""Carrying out cache operations against providers (called by the Celery task).

An attempt claims the operation (status running, a lease, attempt count) in one short
transaction, calls the provider outside any transaction, then records the result in a
second one. Running it twice is safe: a finished operation is a no-op, a running one
with a live lease belongs to someone else, and provider calls are idempotent (Vertex
creation adopts the remote cache carrying our display name; vLLM warming is a request).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import diff, values_snapshot
from billing.ttl_policy import REFUSE
from caches.cron import next_cron_time
from caches.models import (
    TERMINAL_STATES,
    CacheObject,
    CacheOperation,
    CacheState,
    CacheTransition,
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
from caches.providers.vertex import VertexProvider
from caches.services.creation import creation_book, economic_creation_decision
from caches.services.locks import operation_lock
from caches.services.residency import prefills_book, vllm_result_record
from caches.services.transitions import cache_transition
from tenants.actor import Actor

logger = logging.getLogger(__name__)

OPEN = (OperationStatus.PENDING, OperationStatus.RUNNING)
SYSTEM = Actor.system("cache-operations")


def _claim(operation_id: str) -> CacheOperation | None:
    """Mark the operation running under a lease; None when there is nothing to do.

    Lock order (``caches.services.locks``): the cache row, then the operation row; the
    tenant is read, never locked.
    """
    now = timezone.now()
    with transaction.atomic():
        locked = operation_lock(operation_id=operation_id, skip_locked=True)
        if locked is None:
            return None
        cache, op = locked
        if op.status not in OPEN:
            return None
        if op.status == OperationStatus.RUNNING and op.lease_until and op.lease_until > now:
            return None  # another worker holds it
        if op.attempts >= settings.CACHEPLANE_OPERATION_MAX_ATTEMPTS:
            _fail(op, "attempts_exhausted", f"gave up after {op.attempts} attempts: {op.error}")
            return None
        if op.kind == OperationKind.CREATE:
            if cache.ttl_policy == TtlPolicy.ECONOMIC:
                decision = economic_creation_decision(cache=cache, now=now)
                if decision is not None and decision.action == REFUSE:
                    _fail(op, "budget_near_limit", f"autopilot: {decision.reason}")
                    return None
                if decision is not None:
                    # Created with the autopilot's TTL, not the one requested (a learned
                    # keep-alive of 0 means the minimum TTL, not the full request).
                    op.params = {**op.params, "ttl_seconds": decision.ttl_from(now.timestamp())}
                    op.save(update_fields=["params"])
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
            if cache.state == CacheState.ACTIVE and not is_pin(op, cache):
                cache_transition(
                    cache=cache,
                    to_state=CacheState.REFRESHING,
                    actor=SYSTEM,
                    reason=op.params.get("reason", "refresh"),
                )
            elif cache.state not in (CacheState.REFRESHING, CacheState.ACTIVE):
                operation_finish(
                    op, OperationStatus.FAILED, "invalid_state", f"cache is {cache.state}"
                )
                return None
        op.status = OperationStatus.RUNNING
        op.attempts += 1
        op.started_at = op.started_at or now
        op.lease_until = now + timedelta(seconds=settings.CACHEPLANE_OPERATION_LEASE_SECONDS)
        op.save(update_fields=["status", "attempts", "started_at", "lease_until"])
        return op


def is_pin(op: CacheOperation, cache: CacheObject) -> bool:
    """A vLLM refresh nobody asked for: the scheduler keeping the prefix blocks resident.

    Pins run every few minutes per cache and usually change nothing, so they do not pass
    through ``refreshing`` and write a timeline entry and an audit event only when the
    placement or the token count changed (see ``operation_apply_success``).
    """
    return (
        op.kind == OperationKind.REFRESH
        and cache.provider == Provider.VLLM
        and op.requested_by_id is None
    )


def operation_finish(op: CacheOperation, status: str, code: str = "", error: str = "") -> None:
    """Close an operation (locked by the caller) with its final status and error."""
    op.status = status
    op.error_code = code
    op.error = error[:2000]
    op.finished_at = timezone.now()
    op.lease_until = None
    op.save(update_fields=["status", "error_code", "error", "finished_at", "lease_until"])


def _fail(op: CacheOperation, code: str, message: str) -> None:
    """Fail ``op`` (locked by the caller, with its cache) and settle the cache's state."""
    operation_finish(op, OperationStatus.FAILED, code, message)
    cache = op.cache
    cache.last_error, cache.last_error_code = message[:2000], code
    if op.kind == OperationKind.CREATE and cache.state in (CacheState.PENDING, CacheState.CREATING):
        cache_transition(
            cache=cache,
            to_state=CacheState.FAILED,
            actor=SYSTEM,
            reason=message,
            extra_fields=("last_error", "last_error_code"),
        )
    elif op.kind == OperationKind.REFRESH and (
        cache.state == CacheState.REFRESHING
        or (cache.state == CacheState.ACTIVE and code == "remote_gone")
    ):
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
    if op.kind == OperationKind.CREATE and op.params.get("ttl_seconds"):
        op.cache.ttl_seconds = int(op.params["ttl_seconds"])  # the autopilot's, as created
    try:
        if op.kind == OperationKind.CREATE:
            remote = provider.create(op.cache, retry=op.attempts > 1)
        elif op.kind == OperationKind.REFRESH:
            ttl = int(op.params.get("ttl_seconds") or op.cache.ttl_seconds)
            remote = provider.refresh(op.cache, ttl_seconds=ttl)
        else:
            provider.evict(op.cache)
            remote = RemoteState()
    except TransientProviderError as exc:
        with transaction.atomic():
            pair = operation_lock(operation_id=op.pk)
            if pair is not None and pair[1].status == OperationStatus.RUNNING:
                locked = pair[1]
                locked.status, locked.lease_until = OperationStatus.PENDING, None
                locked.error, locked.error_code = str(exc)[:2000], exc.code
                locked.save(update_fields=["status", "lease_until", "error", "error_code"])
        raise
    except ProviderError as exc:  # permanent (transient ones were handled above)
        with transaction.atomic():
            pair = operation_lock(operation_id=op.pk)
            if pair is None or pair[1].status != OperationStatus.RUNNING:
                return pair[1].status if pair else None  # reconciliation settled it
            _fail(pair[1], exc.code, str(exc))
        return OperationStatus.FAILED
    with transaction.atomic():
        pair = operation_lock(operation_id=op.pk)
        if pair is None:
            return None
        if pair[1].status != OperationStatus.RUNNING:
            return pair[1].status  # reconciliation settled it meanwhile
        orphaned = False
        if pair[1].kind != OperationKind.EVICT and pair[0].state in SUPERSEDING_STATES:
            orphaned = _superseded(pair[1], remote)
        else:
            operation_apply_success(pair[1], remote)
    if orphaned and isinstance(provider, VertexProvider):
        from caches.services.orphans import orphan_delete

        orphan_delete(
            provider=provider,
            remote_name=remote.remote_name,
            cache=pair[0],
            actor=SYSTEM,
            reason="created after its cache ended (a superseded create)",
        )
    return OperationStatus.SUCCEEDED


#: States a cache can reach while a create or refresh of it is at the provider (an
#: eviction requested meanwhile, an expiry, a reconciliation): its result no longer
#: decides the cache's state.
SUPERSEDING_STATES = (
    CacheState.EVICTING,
    CacheState.EVICTED,
    CacheState.EXPIRED,
    CacheState.FAILED,
)


def _superseded(op: CacheOperation, remote: RemoteState) -> bool:
    """Close a create or refresh whose cache moved on while the provider call ran; True
    when a remote cache now exists that nothing will delete (the cache has ended).

    The cache keeps the state it moved to (moving an evicting cache back to active was
    the bug that left such operations running until their lease ran out). A create made
    a remote cache, which is paid for: its creation is booked, its remote name, token
    count and ``activated_at`` recorded (storage accrues from there until it is deleted),
    and the pending eviction deletes it; if the cache has already ended, the caller
    deletes it at once (``caches.services.orphans``), and reconciliation backs that up.
    """
    cache = op.cache
    if op.kind == OperationKind.CREATE and remote.remote_name and not cache.remote_name:
        now = timezone.now()
        cache.remote_name = remote.remote_name
        fields = ["remote_name", "updated_at"]
        if cache.activated_at is None:
            cache.activated_at = now
            if remote.token_count is not None:
                cache.token_count = remote.token_count
            fields += ["activated_at", "token_count"]
            creation_book(op, cache, now, observe=False)
        cache.save(update_fields=fields)
    if remote.prefills:  # the warm-up or probe ran on the workers: it is paid for
        prefills_book(op=op, cache=cache, remote=remote, now=timezone.now())
    operation_finish(
        op,
        OperationStatus.SUCCEEDED,
        "superseded",
        f"the {op.kind} succeeded at the provider, but the cache is {cache.state} now",
    )
    return (
        op.kind == OperationKind.CREATE
        and bool(remote.remote_name)
        and cache.remote_name == remote.remote_name
        and cache.state in TERMINAL_STATES
    )


def operation_apply_success(op: CacheOperation, remote: RemoteState) -> None:
    """Record what the provider reported and move the cache to its next state.

    ``op`` and its cache are locked by the caller (``operation_lock``). A pin that
    changed nothing but the expiry writes no timeline entry and no audit event.
    """
    cache = op.cache
    now = timezone.now()
    before = {"placement": list(cache.placement or []), "token_count": cache.token_count}
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
        if not (is_pin(op, cache) and cache.ttl_policy == TtlPolicy.FIXED and cache.expire_at):
            # A pin keeps a fixed cache's blocks resident; it never moves its expiry.
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
            creation_book(op, cache, now)
        vllm_fields, evicted = vllm_result_record(op=op, cache=cache, remote=remote, now=now)
        fields += vllm_fields
        reason = f"{op.kind} succeeded"
        if remote.cached_tokens is not None:
            reason += f" (resident: {remote.cached_tokens} cached tokens)"
        if evicted:
            reason += f": {evicted}"
        if cache.state == CacheState.ACTIVE and is_pin(op, cache):
            _pin_record(cache=cache, before=before, fields=fields, reason=reason, alert=evicted)
            operation_finish(op, OperationStatus.SUCCEEDED)
            return
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


def _pin_record(
    *, cache: CacheObject, before: dict[str, Any], fields: list[str], reason: str, alert: str
) -> None:
    """Save a pin's result; audit and timeline only what changed (usually nothing), and
    a timeline entry when the probe found the pinned prefix evicted (``alert``)."""
    cache.save(update_fields=sorted({*fields, "updated_at"}))
    after = {"placement": list(cache.placement or []), "token_count": cache.token_count}
    changed = sorted(name for name in after if before.get(name) != after[name])
    if not changed and not alert:
        return
    # One coalesced record for a pin that moved, re-counted or re-warmed the prefix.
    text = f"pin: {', '.join(changed)} changed" if changed else "pin"
    CacheTransition.objects.create(
        tenant_id=cache.tenant_id,
        cache=cache,
        from_state=cache.state,
        to_state=cache.state,
        reason=(f"{text}; {alert}" if alert else text)[:300],
    )
    if not changed:
        return
    audit_record(
        actor=SYSTEM,
        action="caches.cache.update",
        tenant=cache.tenant,
        target_type="cache",
        target_id=str(cache.pk),
        changes=diff(values_snapshot(before), values_snapshot(after)),
        details={"reason": reason},
    )


def next_refresh_time(cache: CacheObject, now: datetime) -> datetime | None:
    """When the scheduler should look at this cache again.

    vLLM caches are re-probed every pin interval (keeping blocks recently used so LRU
    keeps them); sliding Vertex caches are reviewed when 80 % of the TTL has passed, so an
    extension lands before expiry; economic ones at once (the autopilot then schedules
    its own reviews); fixed Vertex caches need no review.
    """
    if cache.provider == Provider.VLLM:
        return now + timedelta(seconds=settings.CACHEPLANE_VLLM_PIN_REFRESH_SECONDS)
    if cache.ttl_policy == TtlPolicy.ECONOMIC:
        return now  # the autopilot reviews it at once and schedules its own next look
    if cache.ttl_policy == TtlPolicy.SLIDING:
        return now + timedelta(seconds=cache.ttl_seconds * 0.8)
    return None
