"""The one authorization path: ``authorize(principal, permission, tenant)``.

Deny by default: a permission holds only if an unexpired binding grants it, at the
tenant or at platform scope. REST views, console pages, WebSocket consumers and the
gateway all call this function; nothing else decides access.
"""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from tenants.models import Principal, RoleBinding, Tenant, TenantState
from tenants.permissions import ALL_PERMISSIONS, PLATFORM_PERMISSIONS

_CACHE_ATTR = "_cacheplane_permission_cache"


def principal_permissions(*, principal: Principal | None, tenant: Tenant | None) -> frozenset[str]:
    """Every permission ``principal`` holds at ``tenant`` (None: at platform scope).

    Cached on the principal object, which lives for one request or connection; a
    binding change is therefore visible from the next request on.
    """
    if principal is None or not principal.is_active or not principal.pk:
        return frozenset()
    cache: dict = principal.__dict__.setdefault(_CACHE_ATTR, {})
    key = tenant.pk if tenant is not None else None
    if key in cache:
        return cache[key]
    now = timezone.now()
    bindings = RoleBinding.objects.filter(principal=principal).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )
    if tenant is None:
        bindings = bindings.filter(tenant__isnull=True)
    elif principal.is_service_account and principal.tenant_id != tenant.pk:
        cache[key] = frozenset()  # a service account exists only inside its own tenant
        return cache[key]
    else:
        scoped = Q(tenant__isnull=True)
        # A suspended tenant refuses its own members; platform operators keep access.
        if tenant.state == TenantState.ACTIVE:
            scoped |= Q(tenant=tenant)
        bindings = bindings.filter(scoped)
    granted: set[str] = set()
    for binding_tenant_id, permissions in bindings.values_list("tenant_id", "role__permissions"):
        if binding_tenant_id is None and tenant is not None:
            permissions = [p for p in permissions if p not in PLATFORM_PERMISSIONS]
        granted.update(permissions)
    cache[key] = frozenset(granted)
    return cache[key]


def principal_permissions_forget(principal: Principal) -> None:
    """Drop the per-object cache (after this principal's bindings changed)."""
    principal.__dict__.pop(_CACHE_ATTR, None)


def authorize(*, principal: Principal | None, permission: str, tenant: Tenant | None) -> bool:
    """True when ``principal`` holds ``permission`` at ``tenant`` (None = platform)."""
    if permission not in ALL_PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r}")
    if permission in PLATFORM_PERMISSIONS and tenant is not None:
        raise ValueError(f"{permission} is a platform permission; check it with tenant=None")
    return permission in principal_permissions(principal=principal, tenant=tenant)


def principal_has_any_binding(*, principal: Principal | None, tenant: Tenant) -> bool:
    """Whether the principal may know that ``tenant`` exists (any permission there)."""
    return bool(principal_permissions(principal=principal, tenant=tenant))
