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
  not_found`` with the same body, and the same work: one query resolves the tenant and
  the caller's bindings together (``tenant_access_resolve``, the same statement
  whether the tenant exists or not), and one denial row of the same shape goes to the
  **platform chain** (``details``: ``reason``, ``permission``, ``tenant_ref``). A
  caller who is no member of a tenant is no part of its log: writing the probe into
  the tenant's chain would cost differently from a missing tenant (another chain head,
  the tenant row's key lock) and would hand that tenant's auditors another tenant's
  user name, address and user agent.
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
from tenants.services.authorization import (
    HeldPermissions,
    principal_held,
    tenant_access_resolve,
)

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
    # One query, the same statement whether the tenant exists or not: "missing" and
    # "forbidden" cannot be told apart by timing.
    tenant, held = tenant_access_resolve(principal=actor.principal, tenant_ref=tenant_ref)

    def deny(reason: str, error: Exception, *, member: bool) -> Exception:
        audit_denial(
            actor=actor,
            action=action,
            # A member's refusal is its tenant's evidence; a non-member's (404) goes to
            # the platform chain, the same row whether the tenant exists or not.
            tenant=tenant if member else None,
            target_type=target_type,
            target_id=target_id,
            details={
                **(details or {}),
                "reason": reason,
                "permission": permission,
                "tenant_ref": str(tenant_ref)[:100],
            },
        )
        return error

    reason = _not_found_reason(tenant=tenant, held=held, api_key=api_key)
    if reason is not None:
        raise deny(reason, TenantNotFound(NOT_FOUND_MESSAGE), member=False)
    assert tenant is not None
    if not held.permissions:
        raise deny("tenant_suspended", TenantSuspended("The tenant is suspended."), member=True)
    if permission != MEMBER and permission not in held.permissions:
        raise deny(
            "missing_permission",
            PermissionMissing(f"You lack the permission {permission!r} on this tenant."),
            member=True,
        )
    return Grant(tenant=tenant, permissions=held.permissions)


def _not_found_reason(
    *, tenant: Tenant | None, held: HeldPermissions, api_key: ApiKey | None
) -> str | None:
    """Why the caller must be told "not found" (None: it may know the tenant exists)."""
    if tenant is None:
        return "no_such_tenant"
    if api_key is not None and api_key.tenant_id != tenant.pk:
        return "api_key_of_another_tenant"
    if not held.permissions and not held.member_of_suspended:
        return "no_binding"
    return None


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
