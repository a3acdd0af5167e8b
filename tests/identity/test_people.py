"""The people lifecycle: disable and re-enable, sign out everywhere, remove, password reset."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import Client

from audit.models import AuditEvent
from tenants.models import Principal, RoleBinding
from tenants.services import keys
from tests.factories import HumanFactory, TenantFactory, actor_for, bind

pytestmark = pytest.mark.django_db
PASSWORD = "a-person-password-123"


@pytest.fixture
def ops(api):
    admin = HumanFactory(username="ops")
    bind(admin, "platform.admin", None)
    api.force_login(admin)
    return admin


@pytest.fixture
def person():
    tenant = TenantFactory(slug="acme-legal")
    bind(HumanFactory(username="owner"), "tenant.admin", tenant)
    someone = HumanFactory(username="dana", password=PASSWORD)
    bind(someone, "tenant.developer", tenant)
    return someone


def _signed_in_client(username: str) -> Client:
    client = Client()
    assert client.post("/login/", {"username": username, "password": PASSWORD}).status_code == 302
    return client


def _key_status(token: str) -> int:
    return (
        Client().get("/api/v1/tenants/acme-legal", HTTP_AUTHORIZATION=f"Bearer {token}").status_code
    )


def test_disabling_a_person_stops_their_sessions_and_keys_at_once(
    api, ops, person, django_capture_on_commit_callbacks
) -> None:
    browser = _signed_in_client("dana")
    tenant = person.bindings.get().tenant
    token = keys.api_key_create(actor=actor_for(person), tenant=tenant, name="mine").plaintext
    assert _key_status(token) == 200  # now cached for the revocation bound

    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/v1/platform/principals/{person.pk}/disable")

    assert response.status_code == 200 and response.json()["is_active"] is False
    assert browser.get("/").status_code == 302  # back to the login page
    assert _key_status(token) == 401
    event = AuditEvent.objects.get(action="identity.principal.disable")
    assert event.actor_id == str(ops.pk)
    assert event.target_id == str(person.pk)
    assert event.changes == {"is_active": {"before": True, "after": False}}
    assert AuditEvent.objects.get(action="identity.principal.sessions_end").details == {
        "sessions": 1
    }

    assert api.post(f"/api/v1/platform/principals/{person.pk}/enable").status_code == 200
    assert _key_status(token) == 200
    enabled = AuditEvent.objects.get(action="identity.principal.enable")
    assert enabled.changes == {"is_active": {"before": False, "after": True}}


def test_a_platform_admin_cannot_disable_themselves(api, ops) -> None:
    response = api.post(f"/api/v1/platform/principals/{ops.pk}/disable")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "cannot_disable_self"
    assert Principal.objects.get(pk=ops.pk).is_active


def test_sign_out_everywhere_ends_every_session_of_the_person(api, ops, person) -> None:
    first, second = _signed_in_client("dana"), _signed_in_client("dana")

    assert api.post(f"/api/v1/platform/principals/{person.pk}/sign-out").status_code == 200

    assert first.get("/").status_code == 302 and second.get("/").status_code == 302
    row = AuditEvent.objects.get(action="identity.principal.sessions_end")
    assert row.details == {"sessions": 2}
    assert Principal.objects.get(pk=person.pk).is_active  # signed out, not disabled


def test_removing_a_person_removes_their_bindings_and_keeps_their_history(api, ops, person) -> None:
    bind(person, "platform.auditor", None)

    assert api.post(f"/api/v1/platform/principals/{person.pk}/remove").status_code == 200

    assert not RoleBinding.objects.filter(principal=person).exists()
    assert Principal.objects.filter(pk=person.pk, is_active=False).exists()
    removal = AuditEvent.objects.get(action="identity.principal.remove")
    assert removal.details == {"tenants": 1, "platform_roles": ["platform.auditor"]}
    policy = AuditEvent.objects.get(action="tenants.policy.set")
    assert policy.details["reason"] == "principal_removed"


def test_a_tenant_admin_cannot_disable_people(api, person) -> None:
    owner = Principal.objects.get(username="owner")
    api.force_login(owner)

    assert api.post(f"/api/v1/platform/principals/{person.pk}/disable").status_code == 403
    assert Principal.objects.get(pk=person.pk).is_active


def test_cacheplane_admin_reset_password_recovers_the_admin(monkeypatch) -> None:
    HumanFactory(username="admin", password="the-forgotten-password")
    out = io.StringIO()

    call_command("admin", "reset-password", "admin", stdout=out)

    new = out.getvalue().strip().rsplit(": ", 1)[1]
    client = Client()
    assert client.post("/login/", {"username": "admin", "password": new}).status_code == 302
    assert (
        Client()
        .post("/login/", {"username": "admin", "password": "the-forgotten-password"})
        .status_code
        == 200
    )
    row = AuditEvent.objects.get(action="identity.principal.password_reset")
    assert row.auth_method == "cli" and new not in str(row.details)

    monkeypatch.setattr("sys.stdin", io.StringIO("a-chosen-password-456\n"))
    call_command("admin", "reset-password", "admin", "--password-stdin", stdout=io.StringIO())
    assert (
        Client()
        .post("/login/", {"username": "admin", "password": "a-chosen-password-456"})
        .status_code
        == 302
    )


def test_the_people_table_disables_and_re_enables_a_person(client, person) -> None:
    admin = HumanFactory(username="ops")
    bind(admin, "platform.admin", None)
    client.force_login(admin)
    assert b"Sign out everywhere" in client.get("/platform/tenants/").content

    assert client.post(f"/platform/people/{person.pk}/disable").status_code == 302
    assert not Principal.objects.get(pk=person.pk).is_active
    assert client.post(f"/platform/people/{person.pk}/enable").status_code == 302
    assert Principal.objects.get(pk=person.pk).is_active
    assert client.post(f"/platform/people/{person.pk}/nonsense").status_code == 404
