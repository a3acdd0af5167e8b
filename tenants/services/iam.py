"""A tenant's IAM policy (its role bindings), custom roles and service accounts.

Two rules guard every grant:
- no escalation (Kubernetes RBAC): a caller may grant only permissions it holds itself
  at that tenant, whether through a binding, a custom role or a key for a service
  account;
- a tenant never loses its last tenant admin through the API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot, values_snapshot
from controlplane.errors import ValidationFailed
from tenants.actor import Actor, AuthMethod
from tenants.errors import (
    DuplicateName,
    EscalationDenied,
    EtagMismatch,
    InvalidExpiry,
    LastTenantAdmin,
    ReservedRoleName,
    UnknownPermission,
    UnknownPrincipal,
    UnknownRole,
)
from tenants.models import Principal, PrincipalKind, Role, RoleBinding, RoleScope, Tenant
from tenants.permissions import PREDEFINED_ROLES, TENANT_ADMIN_ROLE, TENANT_PERMISSIONS
from tenants.services.authorization import principal_permissions

SERVICE_ACCOUNT_NAME = re.compile(r"^[a-z][a-z0-9-]{1,38}[a-z0-9]$")
# The same rule as the API's RoleCreateInput, enforced here too (the CLI and other
# services call role_create directly); fullmatch, so no trailing newline slips through.
ROLE_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9_.-]{2,63}")
# Built-in role namespaces: every predefined role's first segment, plus the product's
# own name for roles a later release may add. A custom role may not start with one of
# them in any case ("Platform.admin", "TENANT-admin"), so no custom role can pass for a
# built-in one in a policy, an audit row or the console.
RESERVED_ROLE_PREFIXES = tuple(
    sorted({role.name.split(".", 1)[0].lower() for role in PREDEFINED_ROLES} | {"cacheplane"})
)
_RESERVED_ROLE_NAME = re.compile(
    rf"(?:{'|'.join(map(re.escape, RESERVED_ROLE_PREFIXES))})(?:[._-]|$)", re.IGNORECASE
)


def role_name_check(name: str) -> None:
    """Raise ValidationFailed (malformed) or ReservedRoleName (a built-in namespace)."""
    if not isinstance(name, str) or not ROLE_NAME.fullmatch(name):
        raise ValidationFailed(
            "Role names are 3-64 characters: letters, digits, '.', '_' and '-', "
            "starting with a letter.",
            details={"field": "name"},
        )
    if _RESERVED_ROLE_NAME.match(name):
        raise ReservedRoleName(
            f"{name!r} is in a namespace reserved for predefined roles "
            f"({', '.join(p + '.' for p in RESERVED_ROLE_PREFIXES)} in any case).",
            details={"name": name, "reserved_prefixes": list(RESERVED_ROLE_PREFIXES)},
        )


@dataclass(frozen=True)
class BindingSpec:
    """One requested binding of a policy: a role name, a principal id, an optional expiry."""

    role: str
    principal_id: str
    expires_at: datetime | None = None


@dataclass(frozen=True)
class Policy:
    tenant: Tenant
    version: int
    bindings: list[RoleBinding]

    @property
    def etag(self) -> str:
        return policy_etag(self.tenant.pk, self.version)


def policy_etag(tenant_id: object, version: int) -> str:
    """Opaque to clients; changes whenever the policy is replaced."""
    return f'"{str(tenant_id)[:8]}-{version}"'


def policy_get(*, tenant: Tenant) -> Policy:
    """The tenant's current bindings and etag."""
    bindings = list(
        RoleBinding.objects.filter(tenant=tenant)
        .select_related("role", "principal")
        .order_by("role__name", "principal__username")
    )
    return Policy(tenant=tenant, version=tenant.policy_version, bindings=bindings)


def role_resolve(*, tenant: Tenant, name: str) -> Role:
    """A role bindable at ``tenant``: a predefined tenant role or one of its custom roles."""
    role = (
        Role.objects.filter(name=name, scope=RoleScope.TENANT, tenant__isnull=True).first()
        or Role.objects.filter(name=name, tenant=tenant).first()
    )
    if role is None:
        raise UnknownRole(f"Unknown role {name!r} for this tenant.", details={"role": name})
    return role


def _principal_in_tenant(*, tenant: Tenant, principal_id: str) -> Principal:
    try:
        principal = Principal.objects.get(pk=principal_id, is_active=True)
    except (Principal.DoesNotExist, ValueError, TypeError):
        principal = None
    # A service account of another tenant is reported exactly like a missing one.
    if principal is None or (principal.is_service_account and principal.tenant_id != tenant.pk):
        raise UnknownPrincipal(
            f"Unknown principal {principal_id!r}.", details={"principal": principal_id}
        )
    return principal


def require_held_permissions(
    *, actor: Actor, tenant: Tenant, permissions: set[str], what: str
) -> None:
    if actor.auth_method in (AuthMethod.IDP_MAPPING, AuthMethod.SCIM) and actor.principal is None:
        # The IdP mapping (at a login or a SCIM membership change) applies rules a
        # platform admin made (creating a mapping needs tenants.manage, and
        # platform.admin holds every tenant permission): the escalation check happened
        # then, against that admin.
        return
    held = principal_permissions(principal=actor.principal, tenant=tenant)
    missing = sorted(permissions - held)
    if missing:
        raise EscalationDenied(
            f"You cannot grant {what}: it includes permissions you do not hold here.",
            details={"missing_permissions": missing},
        )


def policy_set(
    *,
    actor: Actor,
    tenant: Tenant,
    etag: str,
    bindings: list[BindingSpec],
    details: dict[str, object] | None = None,
) -> Policy:
    """Replace the tenant's bindings as a whole if ``etag`` is current.

    Raises EtagMismatch (stale etag: nothing changes), UnknownRole, UnknownPrincipal,
    EscalationDenied, LastTenantAdmin. One transaction with its audit event.
    """
    now = timezone.now()
    with transaction.atomic():
        # The tenant row lock serializes concurrent replacements: of N writers holding
        # the same etag exactly one sees it current.
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if etag != policy_etag(locked.pk, locked.policy_version):
            raise EtagMismatch(
                "The policy changed since you read it; read it again and retry.",
                details={"current_etag": policy_etag(locked.pk, locked.policy_version)},
            )
        resolved: dict[tuple[str, str], tuple[Role, Principal, datetime | None]] = {}
        for spec in bindings:
            role = role_resolve(tenant=locked, name=spec.role)
            principal = _principal_in_tenant(tenant=locked, principal_id=spec.principal_id)
            if spec.expires_at is not None and spec.expires_at <= now:
                raise InvalidExpiry(
                    "A binding's expires_at must be in the future.", details={"role": spec.role}
                )
            resolved[(str(role.pk), str(principal.pk))] = (role, principal, spec.expires_at)

        current = {
            (str(b.role_id), str(b.principal_id)): b
            for b in RoleBinding.objects.filter(tenant=locked).select_related("role")
        }
        granted: set[str] = set()
        for key, (role, _principal, expires_at) in resolved.items():
            existing = current.get(key)
            if existing is None or existing.expires_at != expires_at:
                granted.update(role.permissions)
        require_held_permissions(
            actor=actor, tenant=locked, permissions=granted, what="these bindings"
        )

        had_admin = any(
            b.role.name == TENANT_ADMIN_ROLE and b.expires_at is None for b in current.values()
        )
        keeps_admin = any(
            role.name == TENANT_ADMIN_ROLE and expires_at is None and principal.is_active
            for role, principal, expires_at in resolved.values()
        )
        if had_admin and not keeps_admin:
            raise LastTenantAdmin(
                "The policy must keep at least one non-expiring tenant admin binding."
            )

        removed = [b for key, b in current.items() if key not in resolved]
        RoleBinding.objects.filter(pk__in=[b.pk for b in removed]).delete()
        added = []
        for key, (role, principal, expires_at) in resolved.items():
            existing = current.get(key)
            if existing is None:
                added.append(
                    RoleBinding.objects.create(
                        tenant=locked, principal=principal, role=role, expires_at=expires_at
                    )
                )
            elif existing.expires_at != expires_at:
                existing.expires_at = expires_at
                existing.save(update_fields=["expires_at"])
        locked.policy_version += 1
        locked.save(update_fields=["policy_version", "updated_at"])
        audit_record(
            actor=actor,
            action="tenants.policy.set",
            tenant=locked,
            target_type="iam_policy",
            target_id=str(locked.pk),
            changes=diff(
                values_snapshot(
                    {
                        "bindings": sorted(
                            _describe(b.role, b.principal_id, b.expires_at)
                            for b in current.values()
                        ),
                        "version": locked.policy_version - 1,
                    }
                ),
                values_snapshot(
                    {
                        "bindings": sorted(_describe(r, p.pk, e) for r, p, e in resolved.values()),
                        "version": locked.policy_version,
                    }
                ),
            ),
            details={**(details or {}), "added": len(added), "removed": len(removed)},
        )
    return policy_get(tenant=locked)


def _describe(role: Role, principal_id: object, expires_at: datetime | None) -> str:
    suffix = f" until {expires_at.isoformat()}" if expires_at else ""
    return f"{role.name}:{principal_id}{suffix}"


def permissions_test(*, actor: Actor, tenant: Tenant, permissions: list[str]) -> list[str]:
    """The subset of ``permissions`` the caller holds here (testIamPermissions)."""
    unknown = sorted(set(permissions) - set(TENANT_PERMISSIONS))
    if unknown:
        raise UnknownPermission(
            f"Unknown permission(s): {', '.join(unknown)}.", details={"unknown": unknown}
        )
    held = principal_permissions(principal=actor.principal, tenant=tenant)
    return [p for p in permissions if p in held]


def role_create(
    *,
    actor: Actor,
    tenant: Tenant,
    name: str,
    title: str,
    permissions: list[str],
    description: str = "",
) -> Role:
    """A custom role of this tenant; only tenant permissions the caller holds itself.

    Raises UnknownPermission, ValidationFailed (malformed name), ReservedRoleName (a
    built-in namespace such as ``platform.`` in any case, or a predefined role's name),
    EscalationDenied, DuplicateName (taken in this tenant). Nothing is written on error.
    """
    unknown = sorted(set(permissions) - set(TENANT_PERMISSIONS))
    if unknown:
        raise UnknownPermission(
            f"Unknown or non-tenant permission(s): {', '.join(unknown)}.",
            details={"unknown": unknown},
        )
    role_name_check(name)
    if Role.objects.filter(name__iexact=name, tenant__isnull=True).exists():
        raise ReservedRoleName(f"{name!r} is the name of a predefined role.")
    require_held_permissions(
        actor=actor, tenant=tenant, permissions=set(permissions), what="this role"
    )
    with transaction.atomic():
        try:
            with transaction.atomic():
                role = Role.objects.create(
                    tenant=tenant,
                    name=name,
                    title=title,
                    description=description,
                    scope=RoleScope.TENANT,
                    permissions=sorted(set(permissions)),
                )
        except IntegrityError:
            raise DuplicateName(f"A role named {name!r} already exists here.") from None
        audit_record(
            actor=actor,
            action="tenants.role.create",
            tenant=tenant,
            target_type="role",
            target_id=str(role.pk),
            changes=diff(EMPTY, model_snapshot(role)),
        )
    return role


def service_account_create(
    *, actor: Actor, tenant: Tenant, name: str, description: str = ""
) -> Principal:
    """A service account of this tenant (API keys only; no password, no console)."""
    if not SERVICE_ACCOUNT_NAME.match(name):
        from controlplane.errors import ValidationFailed

        raise ValidationFailed(
            "Service account names are 3-40 characters: lowercase letters, digits, hyphens.",
            details={"name": name},
        )
    username = f"sa.{tenant.slug}.{name}"
    with transaction.atomic():
        try:
            with transaction.atomic():
                principal = Principal(
                    username=username,
                    kind=PrincipalKind.SERVICE,
                    tenant=tenant,
                    description=description,
                )
                principal.set_unusable_password()
                principal.save()
        except IntegrityError:
            raise DuplicateName(f"A service account named {name!r} already exists.") from None
        audit_record(
            actor=actor,
            action="tenants.service_account.create",
            tenant=tenant,
            target_type="principal",
            target_id=str(principal.pk),
            changes=diff(EMPTY, model_snapshot(principal)),
        )
    return principal
