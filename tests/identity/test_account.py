"""Invitations, password reset and change: Django's own views and tokens, every step audited."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from audit.models import AuditEvent, Outcome
from tenants.models import Principal
from tests.factories import HumanFactory, bind

pytestmark = pytest.mark.django_db
NEW = "a-brand-new-password-789"


def _link(mail) -> str:
    return re.search(r"https?://testserver(/reset/\S+/)", mail.body).group(1)


def _set_password(client: Client, link: str, password: str = NEW):
    page = client.get(link, follow=True)  # Django swaps the token for a session key
    if b'id="account-form"' not in page.content:
        return page
    return client.post(
        page.redirect_chain[-1][0] if page.redirect_chain else link,
        {"new_password1": password, "new_password2": password},
    )


@pytest.fixture
def ops_api(api):
    admin = HumanFactory(username="ops")
    bind(admin, "platform.admin", None)
    api.force_login(admin)
    return api


def test_an_invitation_link_sets_a_first_password_once(
    ops_api, mailoutbox, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):  # the mail leaves after commit
        response = ops_api.post(
            "/api/v1/platform/invitations",
            {"username": "erin", "email": "erin@example.com"},
            format="json",
        )

    assert response.status_code == 201
    erin = Principal.objects.get(username="erin")
    assert not erin.has_usable_password()
    [mail] = mailoutbox
    assert mail.to == ["erin@example.com"]
    client = Client()
    assert _set_password(client, _link(mail)).status_code == 302
    assert Client().post("/login/", {"username": "erin", "password": NEW}).status_code == 302
    assert AuditEvent.objects.filter(action="identity.principal.invite").exists()
    assert AuditEvent.objects.filter(
        action="identity.principal.password_reset", outcome=Outcome.SUCCESS
    ).exists()

    again = _set_password(Client(), _link(mail), "another-password-000")
    assert b'id="invalid-link"' in again.content  # single use
    assert AuditEvent.objects.filter(
        action="identity.principal.password_reset",
        outcome=Outcome.DENIED,
        details__reason="invalid_token",
    ).exists()


def test_an_expired_invitation_link_is_refused(
    ops_api, mailoutbox, settings, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        ops_api.post(
            "/api/v1/platform/invitations",
            {"username": "fred", "email": "fred@example.com"},
            format="json",
        )
    settings.PASSWORD_RESET_TIMEOUT = -1  # every link issued so far is past its lifetime

    page = _set_password(Client(), _link(mailoutbox[0]))

    assert b'id="invalid-link"' in page.content
    assert not Principal.objects.get(username="fred").has_usable_password()


def test_a_wrong_token_is_refused_and_audited() -> None:
    person = HumanFactory(username="gail", email="gail@example.com")
    page = Client().get(f"/reset/{person.pk}/not-a-token/", follow=True)

    assert b'id="invalid-link"' in page.content
    assert AuditEvent.objects.filter(
        action="identity.principal.password_reset", details__reason="invalid_token"
    ).exists()


def test_a_person_resets_a_forgotten_password_by_mail(mailoutbox) -> None:
    HumanFactory(username="hana", email="hana@example.com", password="old-password-123")
    assert Client().post("/password-reset/", {"email": "hana@example.com"}).status_code == 302

    assert _set_password(Client(), _link(mailoutbox[0])).status_code == 302

    assert Client().post("/login/", {"username": "hana", "password": NEW}).status_code == 302
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"identity.principal.password_reset_request", "identity.principal.password_reset"} <= (
        actions
    )


def test_a_person_changes_their_password(client) -> None:
    HumanFactory(username="ivan", password="old-password-123")
    client.post("/login/", {"username": "ivan", "password": "old-password-123"})

    changed = client.post(
        "/account/password/",
        {"old_password": "old-password-123", "new_password1": NEW, "new_password2": NEW},
    )

    assert changed.status_code == 302
    assert Client().post("/login/", {"username": "ivan", "password": NEW}).status_code == 302
    assert AuditEvent.objects.filter(action="identity.principal.password_change").exists()


def test_password_reset_is_off_with_password_login(settings) -> None:
    settings.CACHEPLANE_PASSWORD_LOGIN = False
    assert Client().get("/password-reset/").status_code == 404
