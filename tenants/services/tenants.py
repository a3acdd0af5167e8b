"""Platform operations on tenants: create, update, suspend, resume, rotate the salt."""

from __future__ import annotations

import secrets

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot
from controlplane.live import platform_group, publish_on_commit
from tenants.actor import Actor
from tenants.errors import DuplicateName, UnknownPrincipal
from tenants.models import Principal, PrincipalKind, Role, RoleBinding, Tenant, TenantState
from tenants.permissions import TENANT_ADMIN_ROLE


def tenant_create(
    *, actor: Actor, slug: str, display_name: str, admin: Principal | None = None
) -> Tenant:
    """Create a tenant (and bind ``admin`` as its tenant admin). Audited on the platform chain.

    Raises DuplicateName when the slug is taken; UnknownPrincipal if ``admin`` is a service
    account (those belong to one tenant from birth).
    """
    if admin is not None and admin.kind != PrincipalKind.HUMAN:
        raise UnknownPrincipal("The first tenant admin must be a human principal.")
    with transaction.atomic():
        try:
            with transaction.atomic():  # savepoint: only the slug clash maps to DuplicateName
                tenant = Tenant.objects.create(slug=slug, display_name=display_name)
        except IntegrityError:
            raise DuplicateName(f"A tenant with slug {slug!r} already exists.") from None
        if admin is not None:
            admin_role = Role.objects.get(name=TENANT_ADMIN_ROLE, tenant=None)
            RoleBinding.objects.create(tenant=tenant, principal=admin, role=admin_role)
        audit_record(
            actor=actor,
            action="tenants.tenant.create",
            tenant=None,
            target_type="tenant",
            target_id=str(tenant.pk),
            changes=diff(EMPTY, model_snapshot(tenant)),
            details={"admin": str(admin.pk) if admin else None},
        )
        publish_on_commit(platform_group("events"), "tenants.tenant.created", {"slug": slug})
    return tenant


@transaction.atomic
def tenant_update(*, actor: Actor, tenant: Tenant, display_name: str) -> Tenant:
    """Change the display name (the slug is immutable)."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = model_snapshot(tenant)
    tenant.display_name = display_name
    tenant.save(update_fields=["display_name", "updated_at"])
    audit_record(
        actor=actor,
        action="tenants.tenant.update",
        tenant=None,
        target_type="tenant",
        target_id=str(tenant.pk),
        changes=diff(before, model_snapshot(tenant)),
    )
    return tenant


@transaction.atomic
def tenant_set_state(*, actor: Actor, tenant: Tenant, state: str, reason: str = "") -> Tenant:
    """Suspend or resume. Suspension refuses the tenant's keys and sessions everywhere."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = model_snapshot(tenant)
    if tenant.state != state:
        tenant.state = state
        tenant.suspended_at = timezone.now() if state == TenantState.SUSPENDED else None
        tenant.save(update_fields=["state", "suspended_at", "updated_at"])
    verb = "suspend" if state == TenantState.SUSPENDED else "resume"
    audit_record(
        actor=actor,
        action=f"tenants.tenant.{verb}",
        tenant=None,
        target_type="tenant",
        target_id=str(tenant.pk),
        changes=diff(before, model_snapshot(tenant)),
        details={"reason": reason} if reason else None,
    )
    publish_on_commit(platform_group("events"), f"tenants.tenant.{verb}", {"slug": tenant.slug})
    # Cached key authentications of this tenant must not outlive a suspension here.
    from tenants.services.keys import key_cache

    transaction.on_commit(key_cache.clear)
    return tenant


@transaction.atomic
def tenant_rotate_cache_salt(*, actor: Actor, tenant: Tenant) -> Tenant:
    """New salt secret and version: every vLLM prefix block of the tenant becomes unreachable."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = model_snapshot(tenant)
    tenant.cache_salt_secret = secrets.token_hex(32)
    tenant.cache_salt_version += 1
    tenant.save(update_fields=["cache_salt_secret", "cache_salt_version", "updated_at"])
    audit_record(
        actor=actor,
        action="tenants.cache_salt.rotate",
        tenant=tenant,
        target_type="tenant",
        target_id=str(tenant.pk),
        changes=diff(before, model_snapshot(tenant)),
    )
    return tenant


def human_principal_create(
    *, actor: Actor, username: str, password: str | None, email: str = ""
) -> Principal:
    """Create a human principal (platform operation; bindings are granted separately)."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                principal = Principal.objects.create_user(
                    username=username, password=password, email=email, kind=PrincipalKind.HUMAN
                )
        except IntegrityError:
            raise DuplicateName(f"A principal named {username!r} already exists.") from None
        audit_record(
            actor=actor,
            action="tenants.principal.create",
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            changes=diff(EMPTY, model_snapshot(principal)),
        )
    return principal
