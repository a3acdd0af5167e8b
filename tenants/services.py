"""Writes on tenants and principals. Every service is one transaction."""

from __future__ import annotations

from django.db import transaction

from tenants.models import Principal, PrincipalKind, Tenant

DEMO_TENANTS = (
    ("acme-legal", "Acme Legal (demo)"),
    ("globex-support", "Globex Support (demo)"),
)


@transaction.atomic
def platform_admin_ensure(*, username: str, password: str) -> bool:
    """Create the platform admin principal if missing; returns True when created."""
    if Principal.objects.filter(username=username).exists():
        return False
    Principal.objects.create_superuser(
        username=username, password=password, email="", kind=PrincipalKind.HUMAN
    )
    return True


@transaction.atomic
def demo_tenants_ensure() -> list[Tenant]:
    """Create the demo tenants that do not exist yet; returns the ones created."""
    created = []
    for slug, name in DEMO_TENANTS:
        tenant, was_created = Tenant.objects.get_or_create(
            slug=slug, defaults={"display_name": name}
        )
        if was_created:
            created.append(tenant)
    return created
