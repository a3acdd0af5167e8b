"""authorize(): deny by default, scope, expiry, suspension, service-account confinement."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.models import TenantState
from tenants.permissions import PREDEFINED_ROLES
from tenants.services import authorize
from tenants.services.authorization import principal_permissions_forget
from tests.factories import HumanFactory, ServiceAccountFactory, bind

pytestmark = pytest.mark.django_db


def _fresh(principal):
    principal_permissions_forget(principal)
    return principal


def test_principal_without_bindings_is_denied_everything(tenant_a) -> None:
    nobody = HumanFactory()
    assert not authorize(principal=nobody, permission="caches.get", tenant=tenant_a)
    assert not authorize(principal=nobody, permission="tenants.manage", tenant=None)
    assert not authorize(principal=None, permission="caches.get", tenant=tenant_a)


def test_tenant_binding_grants_only_its_roles_permissions_at_that_tenant(
    tenant_a, tenant_b
) -> None:
    dev = HumanFactory()
    bind(dev, "tenant.developer", tenant_a)
    assert authorize(principal=dev, permission="inference.invoke", tenant=tenant_a)
    assert not authorize(principal=dev, permission="caches.create", tenant=tenant_a)
    assert not authorize(principal=dev, permission="inference.invoke", tenant=tenant_b)


def test_platform_binding_holds_at_every_tenant_and_platform(tenant_a, platform_admin) -> None:
    assert authorize(principal=platform_admin, permission="caches.delete", tenant=tenant_a)
    assert authorize(principal=platform_admin, permission="tenants.manage", tenant=None)


def test_expired_binding_grants_nothing(tenant_a) -> None:
    user = HumanFactory()
    bind(user, "tenant.viewer", tenant_a, expires_at=timezone.now() - timedelta(seconds=1))
    assert not authorize(principal=user, permission="caches.get", tenant=tenant_a)


def test_suspended_tenant_refuses_its_members_but_not_platform_operators(
    tenant_a, admin_a, platform_admin
) -> None:
    tenant_a.state = TenantState.SUSPENDED
    tenant_a.save()
    assert not authorize(principal=_fresh(admin_a), permission="caches.get", tenant=tenant_a)
    assert authorize(principal=platform_admin, permission="caches.get", tenant=tenant_a)


def test_service_account_has_no_permissions_outside_its_tenant(tenant_a, tenant_b) -> None:
    sa = ServiceAccountFactory(tenant=tenant_a)
    bind(sa, "tenant.developer", tenant_a)
    bind(sa, "tenant.developer", tenant_b)  # even a stray binding cannot take it across
    assert authorize(principal=sa, permission="inference.invoke", tenant=tenant_a)
    assert not authorize(principal=_fresh(sa), permission="inference.invoke", tenant=tenant_b)


def test_inactive_principal_is_denied(tenant_a, admin_a) -> None:
    admin_a.is_active = False
    admin_a.save()
    assert not authorize(principal=_fresh(admin_a), permission="iam.get", tenant=tenant_a)


def test_unknown_permission_is_a_programming_error(tenant_a, admin_a) -> None:
    with pytest.raises(ValueError):
        authorize(principal=admin_a, permission="caches.destroy_everything", tenant=tenant_a)


def test_predefined_roles_are_seeded_from_code() -> None:
    from tenants.models import Role

    seeded = {r.name: set(r.permissions) for r in Role.objects.filter(tenant__isnull=True)}
    for definition in PREDEFINED_ROLES:
        assert seeded[definition.name] == set(definition.permissions)
