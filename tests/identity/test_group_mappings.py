"""The IdP group mapping over REST and in the console: platform admins only, audited."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent, Outcome
from identity.models import GroupMapping
from tests.factories import HumanFactory, TenantFactory, bind

pytestmark = pytest.mark.django_db

URL = "/api/v1/platform/group-mappings"


@pytest.fixture
def ops():
    admin = HumanFactory(username="ops")
    bind(admin, "platform.admin", None)
    return admin


def test_a_platform_admin_maps_a_group_lists_and_deletes_it_over_the_api(api, ops) -> None:
    TenantFactory(slug="acme-legal")
    api.force_login(ops)

    created = api.post(
        URL,
        {"tenant": "acme-legal", "group": "ml-legal-admins", "role": "tenant.admin"},
        format="json",
    )

    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["tenant"], body["group"], body["role"]) == (
        "acme-legal",
        "ml-legal-admins",
        "tenant.admin",
    )
    listed = api.get(URL).json()["results"]
    assert [m["id"] for m in listed] == [body["id"]]
    event = AuditEvent.objects.get(action="identity.group_mapping.create")
    assert event.tenant.slug == "acme-legal" and event.actor_id == str(ops.pk)

    assert api.delete(f"{URL}/{body['id']}").status_code == 204
    assert not GroupMapping.objects.exists()
    assert AuditEvent.objects.filter(action="identity.group_mapping.delete").exists()


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        ({"tenant": "nope", "group": "g", "role": "tenant.admin"}, 404, "not_found"),
        ({"tenant": "acme-legal", "group": "g", "role": "no.such"}, 400, "unknown_role"),
        ({"tenant": "acme-legal", "group": "g", "role": "platform.admin"}, 400, "unknown_role"),
        ({"tenant": "acme-legal", "group": "", "role": "tenant.admin"}, 400, "invalid_input"),
    ],
)
def test_bad_mappings_are_refused_and_nothing_is_written(api, ops, payload, status, code) -> None:
    TenantFactory(slug="acme-legal")
    api.force_login(ops)

    response = api.post(URL, payload, format="json")

    assert response.status_code == status and response.json()["error"]["code"] == code
    assert not GroupMapping.objects.exists()


def test_a_duplicate_mapping_is_a_conflict(api, ops) -> None:
    TenantFactory(slug="acme-legal")
    api.force_login(ops)
    payload = {"tenant": "acme-legal", "group": "g", "role": "tenant.viewer"}
    assert api.post(URL, payload, format="json").status_code == 201

    again = api.post(URL, payload, format="json")

    assert again.status_code == 409 and again.json()["error"]["code"] == "duplicate_name"


def test_a_tenant_admin_cannot_map_groups(api) -> None:
    tenant = TenantFactory(slug="acme-legal")
    admin = HumanFactory()
    bind(admin, "tenant.admin", tenant)
    api.force_login(admin)

    response = api.post(
        URL, {"tenant": "acme-legal", "group": "g", "role": "tenant.admin"}, format="json"
    )

    assert response.status_code == 403
    assert not GroupMapping.objects.exists()
    assert AuditEvent.objects.filter(
        action="identity.group_mapping.create", outcome=Outcome.DENIED
    ).exists()


def test_api_keys_cannot_manage_mappings(api, tenant_keys) -> None:
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_keys['gw-acme']['key']}")
    assert api.get(URL).status_code == 403


def test_the_console_page_maps_and_unmaps_a_group(client, ops) -> None:
    TenantFactory(slug="acme-legal")
    client.force_login(ops)
    assert client.get("/platform/sso/").status_code == 200

    response = client.post(
        "/platform/sso/mappings/new",
        {"group": "ml-legal-admins", "tenant": "acme-legal", "role": "tenant.admin"},
    )

    assert response.status_code == 302
    mapping = GroupMapping.objects.get()
    page = client.get("/platform/sso/")
    assert b"ml-legal-admins" in page.content
    assert client.post(f"/platform/sso/mappings/{mapping.pk}/delete").status_code == 302
    assert not GroupMapping.objects.exists()
