"""Custom role names: built-in namespaces are refused in any case, and nothing is written."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from controlplane.errors import ValidationFailed
from tenants.errors import ReservedRoleName
from tenants.models import Role
from tenants.services import iam
from tests.factories import actor_for

pytestmark = pytest.mark.django_db

RESERVED = [
    "platform.admin",
    "Platform.admin",
    "PLATFORM.superuser",
    "tenant.viewer2",
    "Tenant.Admin",
    "tEnAnT-ops",
    "platform_admin",
    "cacheplane.ops",
    "platform",
    "TENANT",
]


def _create(actor, tenant, name: str) -> Role:
    return iam.role_create(
        actor=actor, tenant=tenant, name=name, title="t", permissions=["caches.get"]
    )


@pytest.mark.parametrize("name", RESERVED)
def test_reserved_role_names_are_refused_in_any_case_and_nothing_is_written(
    tenant_a, admin_a, name: str
) -> None:
    roles, events = Role.objects.count(), AuditEvent.objects.count()
    with pytest.raises(ReservedRoleName) as raised:
        _create(actor_for(admin_a), tenant_a, name)
    assert raised.value.code == "reserved_role_name"
    assert (Role.objects.count(), AuditEvent.objects.count()) == (roles, events)


@pytest.mark.parametrize("name", ["platformer", "tenantOps", "ops.platform", "cacheplaner"])
def test_names_that_merely_contain_a_builtin_word_are_allowed(tenant_a, admin_a, name) -> None:
    role = _create(actor_for(admin_a), tenant_a, name)
    assert Role.objects.get(pk=role.pk, tenant=tenant_a).name == name


@pytest.mark.parametrize("name", ["ab", "9lives", "ops\n", "ops role", "x" * 65])
def test_malformed_role_names_are_refused_by_the_service_itself(tenant_a, admin_a, name) -> None:
    roles = Role.objects.count()
    with pytest.raises(ValidationFailed) as raised:
        _create(actor_for(admin_a), tenant_a, name)
    assert raised.value.code == "invalid_input"
    assert Role.objects.count() == roles


def test_the_api_answers_400_reserved_role_name_and_writes_nothing(api, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    roles, events = Role.objects.count(), AuditEvent.objects.count()
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/roles",
        {"name": "Platform.admin", "title": "Sneaky", "permissions": ["caches.get"]},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "reserved_role_name"
    assert (Role.objects.count(), AuditEvent.objects.count()) == (roles, events)
