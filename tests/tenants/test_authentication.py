"""``tenants.authentication``: sessions and passwords resolved in the one module.

API keys, client addresses and single sign-on through this module are covered by
``tests/identity/test_client_address.py``, ``tests/tenants/test_api.py`` and
``tests/identity/test_sso.py``; these tests cover the session and password functions
the WebSocket consumers and the console login view call.
"""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory

from audit.models import AuditEvent
from tenants.authentication import (
    SESSION_LOGIN,
    password_authenticate,
    password_login_refused,
    session_principal,
)
from tenants.models import Principal
from tests.factories import HumanFactory

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery-1"


def _session_key(principal: Principal) -> str:
    client = Client()
    signed_in = client.post("/login/", {"username": principal.username, "password": PASSWORD})
    assert signed_in.status_code == 302
    return str(client.session.session_key)


def test_a_live_session_resolves_to_its_principal() -> None:
    person = HumanFactory(username="erin", password=PASSWORD)
    key = _session_key(person)

    assert session_principal(user_id=person.pk, session_key=key) == person
    assert AuditEvent.objects.filter(action=SESSION_LOGIN, outcome="success").exists()


def test_a_session_resolves_to_nobody_once_it_ends_or_its_person_changes() -> None:
    person = HumanFactory(username="erin", password=PASSWORD)
    other = HumanFactory(username="frank", password=PASSWORD)
    key = _session_key(person)

    assert session_principal(user_id=other.pk, session_key=key) is None  # names someone else
    person.set_password("a-new-password-2")  # Django ties sessions to the password hash
    person.save()
    assert session_principal(user_id=person.pk, session_key=key) is None

    again = _session_key(other)
    Principal.objects.filter(pk=other.pk).update(is_active=False)
    assert session_principal(user_id=other.pk, session_key=again) is None
    assert session_principal(user_id=other.pk, session_key=None) is None


def test_a_session_that_was_logged_out_resolves_to_nobody() -> None:
    person = HumanFactory(username="erin", password=PASSWORD)
    client = Client()
    client.post("/login/", {"username": "erin", "password": PASSWORD})
    key = str(client.session.session_key)
    client.post("/logout/")

    assert session_principal(user_id=person.pk, session_key=key) is None


def test_password_sign_in_is_refused_when_switched_off(settings) -> None:
    request = RequestFactory().post("/login/", REMOTE_ADDR="203.0.113.9")
    assert password_login_refused(request=request) is None

    settings.CACHEPLANE_PASSWORD_LOGIN = False

    assert password_login_refused(request=request) == "password_login_off"


def test_a_password_resolves_to_its_principal_and_a_wrong_one_to_nobody() -> None:
    person = HumanFactory(username="erin", password=PASSWORD)
    request = RequestFactory().post("/login/", REMOTE_ADDR="203.0.113.9")

    assert password_authenticate(request=request, username="erin", password=PASSWORD) == person
    assert password_authenticate(request=request, username="erin", password="wrong") is None
    failed = AuditEvent.objects.get(action=SESSION_LOGIN, outcome="failed")
    assert (failed.target_id, failed.source_ip) == ("erin", "203.0.113.9")
