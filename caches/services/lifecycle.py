"""Requests on cache objects: create, extend TTL, change policy, evict.

Each service validates everything before writing (bad input writes nothing and sends
nothing to a provider), writes the cache and its operation row with the audit event in
one transaction, and enqueues the operation's task after commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot, values_snapshot
from caches import catalog
from caches.content import CacheContent, content_lint
from caches.cron import next_cron_time, validate_cron
from caches.errors import (
    IdempotencyKeyReused,
    InvalidContent,
    InvalidState,
    InvalidTtl,
)
from caches.models import (
    LIVE_STATES,
    CacheObject,
    CacheOperation,
    CacheState,
    OperationKind,
    Provider,
    TtlPolicy,
)
from caches.providers.registry import vertex_scope_for_tenant
from caches.services.locks import cache_lock
from caches.services.transitions import cache_transition
from caches.services.validation import validate_content, validate_model, validate_ttl
from controlplane.task_queue import task_enqueue_on_commit
from tenants.actor import Actor
from tenants.models import Tenant

if TYPE_CHECKING:
    from billing.models import BudgetReservation


@dataclass(frozen=True)
class CacheSpec:
    """A validated-shape request to create a cache (the API serializer builds it)."""

    name: str
    provider: str
    model: str
    content: dict[str, Any]
    ttl_seconds: int | None = None
    ttl_policy: str = TtlPolicy.FIXED
    replication_factor: int = 1
    prewarm_cron: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CreateOutcome:
    operation: CacheOperation
    created: bool  # False: an existing live cache or an idempotent replay was returned


#: Enqueued by name (controlplane.task_queue): the task imports this module, not back.
OPERATION_EXECUTE_TASK = "caches.tasks.cache_operation_execute_task"


def operation_enqueue(operation: CacheOperation) -> None:
    """Run the operation's task once the current transaction commits."""
    task_enqueue_on_commit(OPERATION_EXECUTE_TASK, str(operation.pk))


def cache_create(
    *, tenant: Tenant, actor: Actor, spec: CacheSpec, idempotency_key: str | None = None
) -> CreateOutcome:
    """Record a cache and its create operation; the task creates it remotely.

    Returns the existing operation for an idempotent replay (same key, same content) or
    the existing live cache with the same content and model (no double storage cost).
    Raises the validation errors above; nothing is written when one is raised.
    """
    default_ttl = settings.CACHEPLANE_CACHE_DEFAULT_TTL_SECONDS
    ttl = validate_ttl(
        default_ttl if spec.ttl_seconds is None else spec.ttl_seconds, provider=spec.provider
    )
    validate_cron(spec.prewarm_cron)
    if spec.ttl_policy not in TtlPolicy.values:
        raise InvalidTtl(f"Unknown TTL policy {spec.ttl_policy!r}.")
    if not 1 <= spec.replication_factor <= 8:
        raise InvalidContent("replication_factor must be between 1 and 8.")
    content = validate_content(tenant, spec)
    validate_model(spec, content)
    digest = content.digest()

    if idempotency_key:
        replay = (
            CacheOperation.objects.filter(tenant=tenant, idempotency_key=idempotency_key)
            .select_related("cache")
            .first()
        )
        if replay is not None:
            if replay.cache.content_digest != digest or replay.cache.model != spec.model:
                raise IdempotencyKeyReused("This Idempotency-Key was used for a different request.")
            return CreateOutcome(operation=replay, created=False)

    existing = _live_duplicate(tenant, spec, digest)
    if existing is not None:
        return CreateOutcome(operation=existing, created=False)

    scope = vertex_scope_for_tenant(tenant.pk) if spec.provider == Provider.VERTEX else None
    try:
        with transaction.atomic():
            cache_id = uuid.uuid4()
            reservation = _reserve_storage(tenant, actor, spec, content, ttl, cache_id)
            cache = CacheObject.objects.create(
                id=cache_id,
                budget_reservation_id=reservation.pk if reservation is not None else None,
                tenant=tenant,
                name=spec.name,
                provider=spec.provider,
                model=spec.model,
                content=content.to_dict(),
                content_digest=digest,
                ttl_policy=spec.ttl_policy,
                ttl_seconds=ttl,
                replication_factor=spec.replication_factor,
                prewarm_cron=spec.prewarm_cron,
                vertex_project=scope.project if scope else "",
                vertex_location=scope.location if scope else "",
                created_by=actor.principal,
            )
            operation = CacheOperation.objects.create(
                tenant=tenant,
                cache=cache,
                kind=OperationKind.CREATE,
                idempotency_key=idempotency_key or None,
                requested_by=actor.principal,
            )
            audit_record(
                actor=actor,
                action="caches.cache.create",
                tenant=tenant,
                target_type="cache",
                target_id=str(cache.pk),
                changes=diff(EMPTY, model_snapshot(cache)),
                details={"operation": str(operation.pk)},
            )
            operation_enqueue(operation)
    except IntegrityError:
        # A concurrent request created the same content or name first.
        existing = _live_duplicate(tenant, spec, digest)
        if existing is not None:
            return CreateOutcome(operation=existing, created=False)
        raise InvalidState(f"A live cache named {spec.name!r} already exists.") from None
    return CreateOutcome(operation=operation, created=True)


def _reserve_storage(
    tenant: Tenant,
    actor: Actor,
    spec: CacheSpec,
    content: CacheContent,
    ttl: int,
    cache_id: uuid.UUID,
) -> BudgetReservation | None:
    """Hold the storage cost of the requested TTL on the tenant's budgets (402 if over).

    Unpriced models (and vLLM pools without a GPU price) hold nothing.
    """
    from billing.errors import PriceNotFound
    from billing.services.budgets import budget_reserve_cache_storage

    tokens = catalog.creation_token_estimate(spec.provider, content)
    try:
        return budget_reserve_cache_storage(
            tenant=tenant,
            principal=actor.principal,
            request_id=f"cache:{cache_id}",
            provider=spec.provider,
            model=spec.model,
            tokens=tokens,
            ttl=timedelta(seconds=ttl),
            actor=actor,
        )
    except PriceNotFound:
        return None


def _live_duplicate(tenant: Tenant, spec: CacheSpec, digest: str) -> CacheOperation | None:
    cache = CacheObject.objects.filter(
        tenant=tenant,
        provider=spec.provider,
        model=spec.model,
        content_digest=digest,
        state__in=LIVE_STATES,
    ).first()
    if cache is None:
        if CacheObject.objects.filter(
            tenant=tenant, name=spec.name, state__in=LIVE_STATES
        ).exists():
            raise InvalidState(f"A live cache named {spec.name!r} already exists.")
        return None
    return cache.operations.filter(kind=OperationKind.CREATE).order_by("created_at").first()


def _locked(cache: CacheObject) -> CacheObject:
    # The cache row only (level 2 of caches.services.locks): the tenant is read, not locked.
    return cache_lock(cache_id=cache.pk)


def cache_extend_ttl(*, cache: CacheObject, actor: Actor, ttl_seconds: int) -> CacheOperation:
    """Set expiry to now + ttl (remotely for Vertex, re-warming for vLLM)."""
    validate_ttl(ttl_seconds, provider=cache.provider)
    with transaction.atomic():
        cache = _locked(cache)
        if cache.state != CacheState.ACTIVE:
            raise InvalidState(f"Only active caches can be extended (this one is {cache.state}).")
        operation = CacheOperation.objects.create(
            tenant_id=cache.tenant_id,
            cache=cache,
            kind=OperationKind.REFRESH,
            params={"ttl_seconds": ttl_seconds, "reason": "extend"},
            requested_by=actor.principal,
        )
        audit_record(
            actor=actor,
            action="caches.cache.extend_ttl",
            tenant=cache.tenant,
            target_type="cache",
            target_id=str(cache.pk),
            # The requested TTL: the operation applies it (and audits the state it moves).
            changes=diff(
                model_snapshot(cache, fields=["ttl_seconds"]),
                values_snapshot({"ttl_seconds": ttl_seconds}),
            ),
            details={"operation": str(operation.pk)},
        )
        operation_enqueue(operation)
    return operation


def cache_set_policy(
    *,
    cache: CacheObject,
    actor: Actor,
    ttl_policy: str,
    ttl_seconds: int | None = None,
    prewarm_cron: str | None = None,
) -> CacheObject:
    """Change the TTL policy (and optionally the TTL length and pre-warm schedule)."""
    if ttl_policy not in TtlPolicy.values:
        raise InvalidTtl(f"Unknown TTL policy {ttl_policy!r}.")
    if ttl_seconds is not None:
        validate_ttl(ttl_seconds, provider=cache.provider)
    if prewarm_cron is not None:
        validate_cron(prewarm_cron)
    with transaction.atomic():
        cache = _locked(cache)
        if cache.state not in LIVE_STATES:
            raise InvalidState(f"The cache is {cache.state}; its policy can no longer change.")
        before = model_snapshot(cache)
        cache.ttl_policy = ttl_policy
        if ttl_seconds is not None:
            cache.ttl_seconds = ttl_seconds
        if prewarm_cron is not None:
            cache.prewarm_cron = prewarm_cron
            cache.next_prewarm_at = next_cron_time(prewarm_cron)
        cache.save(
            update_fields=[
                "ttl_policy",
                "ttl_seconds",
                "prewarm_cron",
                "next_prewarm_at",
                "updated_at",
            ]
        )
        audit_record(
            actor=actor,
            action="caches.cache.set_policy",
            tenant=cache.tenant,
            target_type="cache",
            target_id=str(cache.pk),
            changes=diff(before, model_snapshot(cache)),
        )
    return cache


def cache_evict(*, cache: CacheObject, actor: Actor) -> CacheOperation:
    """Stop and delete the cache remotely; idempotent for a cache already being evicted."""
    with transaction.atomic():
        cache = _locked(cache)
        if cache.state == CacheState.EVICTING:
            return cache.operations.filter(kind=OperationKind.EVICT).latest("created_at")
        if cache.state not in LIVE_STATES:
            raise InvalidState(f"The cache is already {cache.state}.")
        operation = CacheOperation.objects.create(
            tenant_id=cache.tenant_id,
            cache=cache,
            kind=OperationKind.EVICT,
            requested_by=actor.principal,
        )
        cache_transition(
            cache=cache, to_state=CacheState.EVICTING, actor=actor, reason="evict requested"
        )
        operation_enqueue(operation)
    return operation


def cache_lint(*, content: dict[str, Any]) -> list[dict[str, str]]:
    """Volatile values in a would-be cached prefix (no writes)."""
    try:
        parsed = CacheContent.from_dict(content)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidContent(f"Malformed content: {exc}") from None
    return [f.__dict__ for f in content_lint(parsed)]
