"""Invitations with roles (send, list, accept once, revoke) and a person's sessions
(list, sign out one), over REST and in the console; every step audited."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from audit.models import AuditEvent, Outcome
from identity.models import Invitation
from identity.services.sessions import session_id
from tenants.models import Principal, RoleBinding
from tests.factories import HumanFactory, TenantFactory, bind

pytestmark = pytest.mark.django_db
PASSWORD = "a-person-password-123"
NEW = "a-brand-new-password-789"


@pytest.fixture
def ops(api):
    admin = HumanFactory(username="ops", password=PASSWORD)
    bind(admin, "platform.admin", None)
    api.force_login(admin)
    return admin


@pytest.fixture
def legal():
    tenant = TenantFactory(slug="acme-legal")
    bind(HumanFactory(username="owner"), "tenant.admin", tenant)
    return tenant


def _link(mail) -> str:
    return re.search(r"https?://testserver(/reset/\S+/)", mail.body).group(1)


def _set_password(client: Client, link: str, password: str = NEW):
    page = client.get(link, follow=True)
    if b'id="account-form"' not in page.content:
        return page
    return client.post(
        page.redirect_chain[-1][0], {"new_password1": password, "new_password2": password}
    )


def _invite(api, django_capture_on_commit_callbacks, **extra):
    with django_capture_on_commit_callbacks(execute=True):
        return api.post(
            "/api/v1/platform/invitations",
            {"username": "erin", "email": "erin@example.com", **extra},
            format="json",
        )


def test_an_invitation_grants_its_roles_is_listed_until_accepted_and_works_once(
    api, ops, legal, mailoutbox, django_capture_on_commit_callbacks
) -> None:
    made = _invite(
        api,
        django_capture_on_commit_callbacks,
        roles=[{"tenant": "acme-legal", "role": "tenant.viewer"}],
    )
    assert made.status_code == 201, made.content
    assert made.json()["roles"] == [["acme-legal", "tenant.viewer"]]
    erin = Principal.objects.get(username="erin")
    assert RoleBinding.objects.get(principal=erin).role.name == "tenant.viewer"
    listed = api.get("/api/v1/platform/invitations").json()["results"]
    assert [i["username"] for i in listed] == ["erin"]

    assert _set_password(Client(), _link(mailoutbox[0])).status_code == 302
    assert api.get("/api/v1/platform/invitations").json()["results"] == []
    assert Invitation.objects.get().accepted_at is not None
    assert AuditEvent.objects.filter(
        action="identity.invitation.accept", target_id=str(erin.pk)
    ).exists()
    assert b'id="invalid-link"' in _set_password(Client(), _link(mailoutbox[0])).content


def test_a_revoked_invitation_link_no_longer_works_and_the_person_is_removed(
    api, ops, legal, mailoutbox, django_capture_on_commit_callbacks
) -> None:
    made = _invite(
        api,
        django_capture_on_commit_callbacks,
        roles=[{"tenant": "acme-legal", "role": "tenant.viewer"}],
    )
    revoked = api.post(f"/api/v1/platform/invitations/{made.json()['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]

    page = _set_password(Client(), _link(mailoutbox[0]))
    assert b'id="invalid-link"' in page.content
    erin = Principal.objects.get(username="erin")
    assert not erin.is_active and erin.removed_at is not None
    assert not RoleBinding.objects.filter(principal=erin).exists()
    assert AuditEvent.objects.filter(action="identity.invitation.revoke").exists()
    again = api.post(f"/api/v1/platform/invitations/{made.json()['id']}/revoke")
    assert again.status_code == 409 and again.json()["error"]["code"] == "invitation_closed"


@pytest.mark.parametrize(
    ("roles", "code"),
    [
        ([{"tenant": "nowhere", "role": "tenant.viewer"}], "invalid_input"),
        ([{"tenant": "acme-legal", "role": "no.such.role"}], "unknown_role"),
    ],
)
def test_a_bad_invitation_writes_nothing(
    api, ops, legal, mailoutbox, django_capture_on_commit_callbacks, roles, code
) -> None:
    response = _invite(api, django_capture_on_commit_callbacks, roles=roles)
    assert response.status_code in (400, 404, 409) and response.json()["error"]["code"] == code
    assert not Principal.objects.filter(username="erin").exists()
    assert not Invitation.objects.exists() and not mailoutbox


def test_the_console_invitations_page_sends_lists_and_revokes(
    ops, legal, mailoutbox, django_capture_on_commit_callbacks
) -> None:
    console = Client()
    console.force_login(ops)
    assert console.get("/platform/invitations/").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        sent = console.post(
            "/platform/invitations/new",
            {
                "username": "erin",
                "email": "erin@example.com",
                "tenant_1": "acme-legal",
                "role_1": "tenant.developer",
            },
        )
    assert sent.status_code == 302 and len(mailoutbox) == 1
    page = console.get("/platform/invitations/").content.decode()
    assert 'data-invitation="erin"' in page and "tenant.developer" in page
    half = console.post(
        "/platform/invitations/new",
        {"username": "fay", "email": "f@example.com", "tenant_1": "acme-legal"},
    )
    assert half.status_code == 400 and not Principal.objects.filter(username="fay").exists()
    invitation = Invitation.objects.get()
    assert console.post(f"/platform/invitations/{invitation.pk}/revoke").status_code == 302
    assert 'data-invitation="erin"' not in console.get("/platform/invitations/").content.decode()


def _signed_out(client: Client) -> bool:
    return client.get("/").get("Location", "").startswith("/login/")


def _signed_in(username: str, agent: str) -> Client:
    client = Client(HTTP_USER_AGENT=agent)
    assert client.post("/login/", {"username": username, "password": PASSWORD}).status_code == 302
    return client


def test_a_persons_sessions_are_listed_and_one_is_signed_out(api, ops, legal) -> None:
    dana = HumanFactory(username="dana", password=PASSWORD)
    bind(dana, "tenant.developer", legal)
    laptop, phone = _signed_in("dana", "Laptop/1.0"), _signed_in("dana", "Phone/2.0")

    listed = api.get(f"/api/v1/platform/principals/{dana.pk}/sessions")
    assert listed.status_code == 200
    rows = listed.json()
    assert sorted(r["user_agent"] for r in rows) == ["Laptop/1.0", "Phone/2.0"]
    assert all(r["ip"] == "127.0.0.1" and r["method"] == "password" for r in rows)
    cookie = laptop.cookies["sessionid"].value
    assert cookie not in listed.content.decode()  # the list never shows a session key

    ended = api.delete(f"/api/v1/platform/principals/{dana.pk}/sessions/{session_id(cookie)}")
    assert ended.status_code == 204
    assert _signed_out(laptop) and not _signed_out(phone)
    event = AuditEvent.objects.get(action="identity.principal.session_end")
    assert event.actor_id == str(ops.pk) or event.actor_id == ops.pk
    assert event.details == {"session": session_id(cookie)}
    missing = api.delete(f"/api/v1/platform/principals/{dana.pk}/sessions/{session_id(cookie)}")
    assert missing.status_code == 404


def test_a_tenant_admin_cannot_list_or_end_sessions(api, legal) -> None:
    owner = Principal.objects.get(username="owner")
    api.force_login(owner)
    assert api.get(f"/api/v1/platform/principals/{owner.pk}/sessions").status_code == 403
    assert AuditEvent.objects.filter(outcome=Outcome.DENIED).exists()


def test_the_console_sessions_page_signs_one_session_out(ops, legal) -> None:
    dana = HumanFactory(username="dana", password=PASSWORD)
    bind(dana, "tenant.developer", legal)
    laptop, phone = _signed_in("dana", "Laptop/1.0"), _signed_in("dana", "Phone/2.0")
    console = Client()
    console.force_login(ops)
    page = console.get(f"/platform/people/{dana.pk}/sessions/").content.decode()
    assert "Laptop/1.0" in page and "Phone/2.0" in page
    sid = session_id(phone.cookies["sessionid"].value)
    assert console.post(f"/platform/people/{dana.pk}/sessions/{sid}/end").status_code == 302
    assert _signed_out(phone) and not _signed_out(laptop)
