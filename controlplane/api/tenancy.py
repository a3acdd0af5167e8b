"""Base views that make every API route fail closed, through the one access boundary.

``TenantScopedMixin`` hands the tenant from the URL, the caller and the action's
permission to ``tenants.access.access_tenant`` before the action runs, and sets
``self.tenant`` (and ``self.held``) when admitted; ``PlatformMixin`` does the same with
``access_platform``. The rules (404 for missing or forbidden, 403 ``tenant_suspended``,
403 ``permission_denied``) and the denial audit live there, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from rest_framework.request import Request

from tenants.access import (
    MEMBER,
    PermissionMissing,
    access_platform,
    access_refused,
    access_tenant,
)
from tenants.actor import Actor
from tenants.models import ApiKey, Tenant

__all__ = ["MEMBER", "ActionPermissionMixin", "PlatformMixin", "TenantScopedMixin"]

if TYPE_CHECKING:
    from rest_framework.generics import GenericAPIView

    # What the mixins are mixed into (a DRF generic view of any model); at runtime they
    # stay plain classes, so the views' method resolution order is unchanged.
    _View = GenericAPIView[Any]
else:
    _View = object


class ActionPermissionMixin(_View):
    """Maps each viewset action to one permission and one audit action name."""

    #: ``{action: permission}``; an action missing here is denied (deny by default).
    action_permissions: dict[str, str] = {}
    #: ``<app>.<entity>``, prefix of audit actions (``tenants.policy`` → ``tenants.policy.get``)
    audit_entity: str = ""

    def action_name(self) -> str:
        action: str | None = getattr(self, "action", None)
        return action or (self.request.method or "").lower()

    def required_permission(self) -> str | None:
        return self.action_permissions.get(self.action_name())

    def actor(self) -> Actor:
        return Actor.from_request(self.request)

    def audit_action(self) -> str:
        return f"{self.audit_entity}.{self.action_name()}"

    def _refuse_unmapped(self, tenant: Tenant | None) -> NoReturn:
        """An action missing from ``action_permissions`` is refused (deny by default)."""
        access_refused(
            actor=self.actor(),
            tenant=tenant,
            action=self.audit_action(),
            reason="action_not_allowed",
            target_type="route",
            target_id=self.request.path[:200],
        )
        raise PermissionMissing("This action is not allowed.")

    def api_key(self) -> ApiKey | None:
        auth = self.request.auth
        return auth if isinstance(auth, ApiKey) else None


class TenantScopedMixin(ActionPermissionMixin):
    """For views under ``/api/v1/tenants/{tenant}/``; sets ``self.tenant``/``self.held``."""

    tenant: Tenant
    held: frozenset[str]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authentication first
        permission = self.required_permission()
        grant = access_tenant(
            actor=self.actor(),
            tenant_ref=str(kwargs.get("tenant", "")),
            # An action without a permission is denied: MEMBER is checked, then refused.
            permission=permission or MEMBER,
            action=self.audit_action(),
            api_key=self.api_key(),
            target_id=request.path[:200],
        )
        if permission is None:
            self._refuse_unmapped(grant.tenant)
        self.tenant = grant.tenant  # type: ignore[assignment]
        self.held = grant.permissions


class PlatformMixin(ActionPermissionMixin):
    """For views under ``/api/v1/platform/``: platform permissions, session auth only."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        permission = self.required_permission()
        if permission is None:
            self._refuse_unmapped(None)
        grant = access_platform(
            actor=self.actor(),
            permission=permission,
            action=self.audit_action(),
            api_key=self.api_key(),
            target_id=request.path[:200],
        )
        self.held = grant.permissions
