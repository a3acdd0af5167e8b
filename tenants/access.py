"""The access boundary: the one place that decides whether a caller may act.

Every entry point calls it — REST base views (``controlplane.api.tenancy``), console
page decorators (``frontend.views.tenant_page`` / ``platform_page``), WebSocket
consumers (``frontend.consumers``) and the gateway (``gateway.identity``) — and none of
them decides access on its own. Given a principal (session user or API key), a tenant
reference and a permission it resolves the tenant and the permissions held there,
decides, and records every denial through ``audit.services.denials.audit_denial``, in
its own transaction, so that a caller's rollback cannot erase it.

The rules (documented in the README, "Tenants, IAM and the audit log"):

* **Missing vs forbidden.** An unknown tenant, a tenant where the principal holds no
  binding, a service account or API key of another tenant: all the same ``404
  not_found`` with the same body. Both paths run the same queries and write one denial
  row each (unknown tenants on the platform chain), so they also take the same time.
* **Suspended tenants.** Platform bindings keep working. A principal whose only
  bindings there are tenant bindings gets ``403 tenant_suspended`` on every entry point
  (REST, console, WebSocket close 4403; API keys are refused at authentication with the
  same code). Someone with no binding still gets 404.
* **Members lacking the permission** get ``403 permission_denied``.
* **API keys are tenant credentials**: platform scope needs a session.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from audit.services.denials import audit_denial
from controlplane.errors import PermissionDenied
from tenants.actor import Actor
from tenants.errors import TenantNotFound, TenantSuspended
from tenants.models import ApiKey, Tenant
from tenants.permissions import ALL_PERMISSIONS, PLATFORM_PERMISSIONS
from tenants.services.authorization import principal_held

#: Pseudo-permission meaning "any binding on this tenant" (reading the tenant itself,
#: testing one's own permissions, a console landing page).
MEMBER = "member"

#: The one message of every "missing or forbidden" answer (identical for both).
NOT_FOUND_MESSAGE = "Not found."


class ApiKeyNotAllowed(PermissionDenied):
    """An API key was presented where only a session is accepted (platform scope)."""

    code = "permission_denied"


class PermissionMissing(PermissionDenied):
    """The caller is a member of the scope but lacks the permission."""

    code = "permission_denied"


@dataclass(frozen=True)
class Grant:
    """An admitted caller: the tenant (None at platform scope) and what it holds there."""

    tenant: Tenant | None
    permissions: frozenset[str]

    def allows(self, permission: str) -> bool:
        return permission in self.permissions


def access_tenant(
    *,
    actor: Actor,
    tenant_ref: str | uuid.UUID,
    permission: str,
    action: str,
    api_key: ApiKey | None = None,
    target_type: str = "route",
    target_id: str = "",
    details: dict[str, Any] | None = None,
) -> Grant:
    """Admit ``actor`` at the tenant ``tenant_ref`` (a slug, or a ``uuid.UUID`` id) for
    ``permission`` (or ``MEMBER``), or raise; every refusal is audited as ``action``.

    Raises TenantNotFound (404), TenantSuspended (403), PermissionMissing (403).
    """
    if permission != MEMBER and permission not in ALL_PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r}")
    if permission in PLATFORM_PERMISSIONS:
        raise ValueError(f"{permission} is a platform permission; use access_platform")
    tenant = _tenant_resolve(tenant_ref)
    # Resolved even for a missing tenant (at platform scope): the same queries run on
    # both paths, so "missing" and "forbidden" cannot be told apart by timing.
    held = principal_held(principal=actor.principal, tenant=tenant)

    def deny(reason: str, error: Exception) -> Exception:
        audit_denial(
            actor=actor,
            action=action,
            tenant=tenant,
            target_type=target_type,
            target_id=target_id,
            details={
                **(details or {}),
                "reason": reason,
                "permission": permission,
                **({"tenant_ref": str(tenant_ref)[:100]} if tenant is None else {}),
            },
        )
        return error

    if tenant is None:
        raise deny("no_such_tenant", TenantNotFound(NOT_FOUND_MESSAGE))
    if api_key is not None and api_key.tenant_id != tenant.pk:
        raise deny("api_key_of_another_tenant", TenantNotFound(NOT_FOUND_MESSAGE))
    if not held.permissions:
        if held.member_of_suspended:
            raise deny("tenant_suspended", TenantSuspended("The tenant is suspended."))
        raise deny("no_binding", TenantNotFound(NOT_FOUND_MESSAGE))
    if permission != MEMBER and permission not in held.permissions:
        raise deny(
            "missing_permission",
            PermissionMissing(f"You lack the permission {permission!r} on this tenant."),
        )
    return Grant(tenant=tenant, permissions=held.permissions)


def access_platform(
    *,
    actor: Actor,
    permission: str,
    action: str,
    api_key: ApiKey | None = None,
    target_type: str = "route",
    target_id: str = "",
    details: dict[str, Any] | None = None,
) -> Grant:
    """Admit ``actor`` at platform scope for the platform ``permission``, or raise.

    Raises ApiKeyNotAllowed (403, keys are tenant credentials), PermissionMissing (403).
    """
    if permission not in PLATFORM_PERMISSIONS:
        raise ValueError(f"{permission!r} is not a platform permission")
    held = principal_held(principal=actor.principal, tenant=None)

    def deny(reason: str, error: Exception) -> Exception:
        audit_denial(
            actor=actor,
            action=action,
            tenant=None,
            target_type=target_type,
            target_id=target_id,
            details={**(details or {}), "reason": reason, "permission": permission},
        )
        return error

    if api_key is not None:
        raise deny(
            "api_key_on_platform_route", ApiKeyNotAllowed("API keys cannot call platform routes.")
        )
    if permission not in held.permissions:
        raise deny(
            "missing_permission",
            PermissionMissing(f"You lack the platform permission {permission!r}."),
        )
    return Grant(tenant=None, permissions=held.permissions)


def access_refused(
    *,
    actor: Actor,
    tenant: Tenant | None,
    action: str,
    reason: str,
    target_type: str = "",
    target_id: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Audit a refusal an entry point makes after admission (a request the boundary let
    in but whose input is refused for security, e.g. a client-supplied ``cache_salt``)."""
    audit_denial(
        actor=actor,
        action=action,
        tenant=tenant,
        target_type=target_type,
        target_id=target_id,
        details={**(details or {}), "reason": reason},
    )


def _tenant_resolve(tenant_ref: str | uuid.UUID) -> Tenant | None:
    # One indexed lookup either way (slug is unique, id is the primary key).
    if isinstance(tenant_ref, uuid.UUID):
        return Tenant.objects.filter(pk=tenant_ref).first()
    return Tenant.objects.filter(slug=str(tenant_ref)[:100]).first()
