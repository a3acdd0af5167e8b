"""First-start setup: predefined roles, the platform admin, demo tenants."""

from __future__ import annotations

from django.db import transaction

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot
from tenants.actor import Actor
from tenants.models import Principal, PrincipalKind, Role, RoleBinding, RoleScope, Tenant
from tenants.permissions import PLATFORM_ADMIN_ROLE, PREDEFINED_ROLES

DEMO_TENANTS = (
    ("acme-legal", "Acme Legal (demo)"),
    ("globex-support", "Globex Support (demo)"),
)


def predefined_roles_sync() -> None:
    """Make the predefined roles in the database equal their definitions in code.

    Runs after every migrate (post_migrate), so a code change to a predefined role
    reaches every deployment on its next migration.
    """
    for definition in PREDEFINED_ROLES:
        Role.objects.update_or_create(
            name=definition.name,
            tenant=None,
            defaults={
                "title": definition.title,
                "scope": RoleScope(definition.scope),
                "permissions": sorted(definition.permissions),
                "is_predefined": True,
            },
        )


@transaction.atomic
def platform_admin_ensure(*, username: str, password: str) -> bool:
    """Create the platform admin (bound to platform.admin) if missing; True when created."""
    if Principal.objects.filter(username=username).exists():
        return False
    admin = Principal.objects.create_superuser(
        username=username, password=password, email="", kind=PrincipalKind.HUMAN
    )
    RoleBinding.objects.create(
        tenant=None, principal=admin, role=Role.objects.get(name=PLATFORM_ADMIN_ROLE, tenant=None)
    )
    audit_record(
        actor=Actor.cli(),
        action="tenants.principal.bootstrap_admin",
        tenant=None,
        target_type="principal",
        target_id=str(admin.pk),
        changes=diff(EMPTY, model_snapshot(admin)),
    )
    return True


def demo_tenants_ensure() -> list[Tenant]:
    """Create the demo tenants that do not exist yet; returns the ones created."""
    from tenants.services.tenants import tenant_create

    created = []
    for slug, name in DEMO_TENANTS:
        if not Tenant.objects.filter(slug=slug).exists():
            created.append(tenant_create(actor=Actor.cli(), slug=slug, display_name=name))
    return created
