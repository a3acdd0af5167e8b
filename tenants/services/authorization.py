"""Permission resolution: which permissions a principal holds at a tenant or the platform.

Deny by default: a permission holds only if an unexpired binding grants it, at the
tenant or at platform scope. This module answers "what is held"; the decision (resolve
the tenant, refuse, audit the refusal) is made in one place, ``tenants.access``, which
every entry point calls. ``authorize`` stays for code that needs a yes/no about the
caller it already admitted (a page choosing which buttons to show).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone

from tenants.models import Principal, RoleBinding, Tenant, TenantState
from tenants.permissions import ALL_PERMISSIONS, PLATFORM_PERMISSIONS

_CACHE_ATTR = "_cacheplane_permission_cache"


@dataclass(frozen=True)
class HeldPermissions:
    """What one principal holds at one scope, and whether it is a member there.

    ``member_of_suspended`` is true when the principal has an unexpired tenant binding
    at a suspended tenant (so it is told ``tenant_suspended``, not "no such tenant").
    """

    permissions: frozenset[str]
    member_of_suspended: bool = False


def principal_held(*, principal: Principal | None, tenant: Tenant | None) -> HeldPermissions:
    """Resolve what ``principal`` holds at ``tenant`` (None: platform scope); one query.

    Cached on the principal object, which lives for one request; a binding change is
    therefore visible from the next request on (sockets re-resolve periodically).
    """
    if principal is None or not getattr(principal, "pk", None) or not principal.is_active:
        return HeldPermissions(frozenset())
    cache: dict = principal.__dict__.setdefault(_CACHE_ATTR, {})
    key = tenant.pk if tenant is not None else None
    if key in cache:
        return cache[key]
    now = timezone.now()
    scope = Q(tenant__isnull=True)
    if tenant is not None:
        scope |= Q(tenant_id=tenant.pk)
    rows = list(
        RoleBinding.objects.filter(principal=principal)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .filter(scope)
        .values_list("tenant_id", "role__permissions")
    )
    granted: set[str] = set()
    member_of_suspended = False
    foreign_service_account = (
        tenant is not None and principal.is_service_account and principal.tenant_id != tenant.pk
    )
    for binding_tenant_id, permissions in rows:
        if foreign_service_account:
            continue  # a service account exists only inside its own tenant
        if binding_tenant_id is None:
            if tenant is not None:
                permissions = [p for p in permissions if p not in PLATFORM_PERMISSIONS]
            granted.update(permissions)
        elif tenant.state == TenantState.ACTIVE:
            granted.update(permissions)
        else:
            # A suspended tenant refuses its own members; platform operators keep access.
            member_of_suspended = True
    held = HeldPermissions(frozenset(granted), member_of_suspended and not granted)
    cache[key] = held
    return held


def principal_permissions(*, principal: Principal | None, tenant: Tenant | None) -> frozenset[str]:
    """Every permission ``principal`` holds at ``tenant`` (None: at platform scope)."""
    return principal_held(principal=principal, tenant=tenant).permissions


def principal_permissions_forget(principal: Principal) -> None:
    """Drop the per-object cache (after this principal's bindings changed)."""
    principal.__dict__.pop(_CACHE_ATTR, None)


def authorize(*, principal: Principal | None, permission: str, tenant: Tenant | None) -> bool:
    """True when ``principal`` holds ``permission`` at ``tenant`` (None = platform).

    A yes/no without audit: for refinements inside a request the boundary already
    admitted. Entry points decide through ``tenants.access`` instead.
    """
    if permission not in ALL_PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r}")
    if permission in PLATFORM_PERMISSIONS and tenant is not None:
        raise ValueError(f"{permission} is a platform permission; check it with tenant=None")
    return permission in principal_permissions(principal=principal, tenant=tenant)


def principal_has_any_binding(*, principal: Principal | None, tenant: Tenant) -> bool:
    """Whether the principal may know that ``tenant`` exists (any permission there)."""
    return bool(principal_permissions(principal=principal, tenant=tenant))
