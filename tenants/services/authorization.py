"""Permission resolution: which permissions a principal holds at a tenant or the platform.

Deny by default: a permission holds only if an unexpired binding grants it, at the
tenant or at platform scope. This module answers "what is held"; the decision (resolve
the tenant, refuse, audit the refusal) is made in one place, ``tenants.access``, which
every entry point calls. ``authorize`` stays for code that needs a yes/no about the
caller it already admitted (a page choosing which buttons to show).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from tenants.models import Principal, Role, RoleBinding, Tenant, TenantState
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
    cache: dict[object, HeldPermissions] = principal.__dict__.setdefault(_CACHE_ATTR, {})
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
    held = _held_from(principal=principal, tenant=tenant, rows=rows)
    cache[key] = held
    return held


#: What a tenant reference may look like (``tenants.models.SLUG_VALIDATOR``, any case,
#: bounded). Anything else is looked up as the empty slug, which matches no tenant, so
#: a malformed reference costs exactly what a well-formed one does and never reaches
#: PostgreSQL as a NUL byte or a surrogate.
_SLUG_LIKE = re.compile(r"[A-Za-z0-9_-]{1,100}")


def _resolve_sql(*, by_id: bool) -> str:
    tenant = Tenant._meta
    columns = ", ".join(f't."{f.column}"' for f in tenant.concrete_fields)
    key = tenant.pk.column if by_id else tenant.get_field("slug").column
    binding = RoleBinding._meta
    role = Role._meta
    # One row per live binding of the principal at the tenant or at platform scope, or
    # one row of NULLs: the LEFT JOINs from a one-row VALUES answer the same shape
    # whether the tenant exists or not, the principal is a member or not.
    return (
        f"SELECT {columns}, b.tenant_id, r.permissions "
        "FROM (VALUES (1)) AS one (x) "
        f'LEFT JOIN "{tenant.db_table}" AS t ON t."{key}" = %s '
        f'LEFT JOIN "{binding.db_table}" AS b ON b.principal_id = %s '
        "AND (b.expires_at IS NULL OR b.expires_at > %s) "
        f'AND (b.tenant_id IS NULL OR b.tenant_id = t."{tenant.pk.column}") '
        f'LEFT JOIN "{role.db_table}" AS r ON r.id = b.role_id'
    )


_SQL_BY_SLUG = _resolve_sql(by_id=False)
_SQL_BY_ID = _resolve_sql(by_id=True)
_TENANT_FIELDS = [f.attname for f in Tenant._meta.concrete_fields]


def tenant_access_resolve(
    *, principal: Principal | None, tenant_ref: str | uuid.UUID
) -> tuple[Tenant | None, HeldPermissions]:
    """Resolve the tenant ``tenant_ref`` (a slug, or a ``uuid.UUID`` id) and what
    ``principal`` holds there, in one query that runs the same way whether or not the
    tenant exists and whether or not the principal is a member.

    This is what keeps "missing" and "forbidden" indistinguishable by timing: the
    access boundary calls it on every tenant-scoped request. A missing tenant holds
    nothing. The result seeds ``principal_held``'s per-request cache.
    """
    active = (
        principal is not None and bool(getattr(principal, "pk", None)) and bool(principal.is_active)
    )
    principal_id = principal.pk if principal is not None and active else None
    ref: str | uuid.UUID
    if isinstance(tenant_ref, uuid.UUID):
        sql, ref = _SQL_BY_ID, tenant_ref
    else:
        text = str(tenant_ref)
        sql, ref = _SQL_BY_SLUG, text if _SLUG_LIKE.fullmatch(text) else ""
    # Raw SQL on purpose: the tenant-scoped managers have no way to say "this tenant
    # or none" in one statement. Scoped all the same: bindings of one principal, at one
    # tenant (by its reference) or at platform scope.
    with connection.cursor() as cursor:
        cursor.execute(sql, [ref, principal_id, timezone.now()])
        rows = cursor.fetchall()
    width = len(_TENANT_FIELDS)
    first = rows[0]
    tenant = (
        Tenant.from_db(connection.alias, _TENANT_FIELDS, first[:width])
        if first[0] is not None
        else None
    )
    bindings = [(row[width], row[width + 1]) for row in rows if row[width + 1] is not None]
    held = _held_from(principal=principal, tenant=tenant, rows=bindings)
    if tenant is not None and active:
        assert principal is not None
        principal.__dict__.setdefault(_CACHE_ATTR, {})[tenant.pk] = held
    return tenant, held


def _held_from(
    *, principal: Principal | None, tenant: Tenant | None, rows: list[tuple[Any, Any]]
) -> HeldPermissions:
    """Fold ``(binding tenant id, role permissions)`` rows into what is held at ``tenant``."""
    if principal is None:
        return HeldPermissions(frozenset())
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
        elif tenant is not None and tenant.state == TenantState.ACTIVE:
            # (tenant is always set here: without one, only platform bindings match)
            granted.update(permissions)
        else:
            # A suspended tenant refuses its own members; platform operators keep access.
            member_of_suspended = True
    return HeldPermissions(frozenset(granted), member_of_suspended and not granted)


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
