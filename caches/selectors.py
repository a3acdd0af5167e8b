"""Reads of cache objects; every read takes the tenant."""

from __future__ import annotations

from django.db.models import QuerySet

from caches.models import CacheObject, CacheOperation, CacheTransition
from tenants.models import Tenant


def cache_list(
    *,
    tenant: Tenant,
    state: str | None = None,
    provider: str | None = None,
    model: str | None = None,
) -> QuerySet[CacheObject]:
    """The tenant's caches, newest first, optionally filtered."""
    qs = CacheObject.objects.filter(tenant=tenant)
    if state:
        qs = qs.filter(state=state)
    if provider:
        qs = qs.filter(provider=provider)
    if model:
        qs = qs.filter(model=model)
    return qs.order_by("-created_at")


def cache_get(*, tenant: Tenant, cache_id: str) -> CacheObject | None:
    """One cache of the tenant, or None (another tenant's id looks exactly like a missing one)."""
    import uuid

    try:
        uuid.UUID(str(cache_id))
    except ValueError:
        return None
    return CacheObject.objects.filter(tenant=tenant, pk=cache_id).first()


def cache_operation_get(*, tenant: Tenant, operation_id: str) -> CacheOperation | None:
    import uuid

    try:
        uuid.UUID(str(operation_id))
    except ValueError:
        return None
    return CacheOperation.objects.filter(tenant=tenant, pk=operation_id).first()


def cache_timeline(*, tenant: Tenant, cache: CacheObject) -> QuerySet[CacheTransition]:
    return CacheTransition.objects.filter(tenant=tenant, cache=cache).order_by("at", "id")
