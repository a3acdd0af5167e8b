"""Base views that make every API route fail closed.

``TenantScopedMixin`` resolves the tenant from the URL, then decides, before the action
runs: unknown tenant, a key of another tenant, or no binding at all → 404 (the API never
reveals that another tenant exists); a member lacking the action's permission → 403;
a member of a suspended tenant → 403 ``tenant_suspended``. Each denial is audited.
``PlatformMixin`` does the same for platform permissions.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.request import Request

from audit.models import Outcome
from audit.services import audit_record
from controlplane.api.authentication import TenantSuspendedError
from tenants.actor import Actor
from tenants.models import RoleBinding, Tenant, TenantState
from tenants.services.authorization import authorize, principal_permissions

#: Action permission meaning "any binding on this tenant" (reading the tenant itself,
#: testing one's own permissions).
MEMBER = "member"


class ActionPermissionMixin:
    """Maps each viewset action to one permission and one audit action name."""

    #: ``{action: permission}``; an action missing here is denied (deny by default).
    action_permissions: dict[str, str] = {}
    #: ``<app>.<entity>``, prefix of audit actions (``tenants.policy`` → ``tenants.policy.get``)
    audit_entity: str = ""

    def action_name(self) -> str:
        return getattr(self, "action", None) or self.request.method.lower()

    def required_permission(self) -> str | None:
        return self.action_permissions.get(self.action_name())

    def actor(self) -> Actor:
        return Actor.from_request(self.request)

    def audit_denied(self, tenant: Tenant | None, reason: str, permission: str | None) -> None:
        audit_record(
            actor=self.actor(),
            action=f"{self.audit_entity}.{self.action_name()}",
            tenant=tenant,
            outcome=Outcome.DENIED,
            target_type="route",
            target_id=self.request.path[:200],
            details={"reason": reason, "permission": permission},
        )


class TenantScopedMixin(ActionPermissionMixin):
    """For views under ``/api/v1/tenants/{tenant}/``; sets ``self.tenant``."""

    tenant: Tenant

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication first
        slug = kwargs.get("tenant")
        tenant = Tenant.objects.filter(slug=slug).first()
        permission = self.required_permission()
        principal = request.user
        if tenant is None:
            raise exceptions.NotFound()
        key = request.auth
        if key is not None and getattr(key, "tenant_id", None) != tenant.pk:
            self.audit_denied(tenant, "api_key_of_another_tenant", permission)
            raise exceptions.NotFound()
        held = principal_permissions(principal=principal, tenant=tenant)
        if not held:
            if (
                tenant.state == TenantState.SUSPENDED
                and RoleBinding.objects.filter(tenant=tenant, principal=principal).exists()
            ):
                self.audit_denied(tenant, "tenant_suspended", permission)
                raise TenantSuspendedError("The tenant is suspended.")
            self.audit_denied(tenant, "no_binding", permission)
            raise exceptions.NotFound()
        if permission is None or (permission != MEMBER and permission not in held):
            self.audit_denied(tenant, "missing_permission", permission)
            raise exceptions.PermissionDenied(
                f"You lack the permission {permission!r} on this tenant."
                if permission
                else "This action is not allowed."
            )
        self.tenant = tenant


class PlatformMixin(ActionPermissionMixin):
    """For views under ``/api/v1/platform/``: platform permissions, session auth only."""

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        permission = self.required_permission()
        if request.auth is not None:
            # API keys are tenant credentials; platform operations need a platform session.
            self.audit_denied(None, "api_key_on_platform_route", permission)
            raise exceptions.PermissionDenied("API keys cannot call platform routes.")
        if permission is None or not authorize(
            principal=request.user, permission=permission, tenant=None
        ):
            self.audit_denied(None, "missing_permission", permission)
            raise exceptions.PermissionDenied(
                f"You lack the platform permission {permission!r}."
                if permission
                else "This action is not allowed."
            )
