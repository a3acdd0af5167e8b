"""Console sessions leave evidence: failed logins, lockouts, logouts and CSRF refusals."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEvent
from tests.factories import HumanFactory

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery"
ATTACKER = "203.0.113.50"


def _rows(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def _login(client: Client, username: str, password: str, ip: str = ATTACKER):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_a_failed_console_login_is_audited_without_the_password() -> None:
    user = HumanFactory(username="carol")
    response = _login(Client(), user.username, "wrong-password-1")
    assert response.status_code == 200  # the form again, with its error
    [row] = _rows("tenants.session.login")
    assert (row.outcome, row.target_id, row.source_ip) == ("failed", "carol", ATTACKER)
    assert "wrong-password-1" not in str(row.details) + str(row.changes)


def test_repeated_failures_lock_the_account_from_that_address_and_are_audited(
    settings,
) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    user = HumanFactory(username="dave")
    client = Client()
    assert _login(client, "dave", "nope-1").status_code == 200
    assert _login(client, "dave", "nope-2").status_code == 200
    locked = _login(client, "dave", "nope-3")
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == int(settings.AXES_COOLOFF_TIME.total_seconds())

    # Locked: the right password is refused too, and no session is made.
    refused = _login(client, "dave", PASSWORD)
    assert refused.status_code == 429
    assert "_auth_user_id" not in client.session
    lockouts = _rows("tenants.session.lockout")
    assert [(r.outcome, r.target_id, r.source_ip) for r in lockouts] == [
        ("denied", "dave", ATTACKER),
        ("denied", "dave", ATTACKER),
    ]
    assert lockouts[0].details["failure_limit"] == 3

    # The lock is per (username, address): the owner elsewhere still gets in.
    elsewhere = Client()
    assert _login(elsewhere, "dave", PASSWORD, ip="198.51.100.1").status_code == 302
    assert elsewhere.session["_auth_user_id"] == str(user.pk)


def test_logout_is_audited_with_the_principal() -> None:
    user = HumanFactory(username="erin")
    client = Client()
    client.force_login(user)
    response = client.post("/logout/", REMOTE_ADDR=ATTACKER)
    assert response.status_code == 302
    [row] = _rows("tenants.session.logout")
    assert (row.outcome, row.actor_id, row.actor_name, row.target_id) == (
        "success",
        str(user.pk),
        "erin",
        str(user.pk),
    )
    assert row.auth_method == "session" and row.source_ip == ATTACKER


def test_a_console_csrf_failure_is_audited_and_answered_with_djangos_page() -> None:
    user = HumanFactory(username="frank")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post(
        "/logout/",
        REMOTE_ADDR=ATTACKER,
        HTTP_ORIGIN="https://evil.example.net",
        HTTP_REFERER="https://evil.example.net/page?token=leak",
    )
    assert response.status_code == 403
    assert b"CSRF" in response.content
    [row] = _rows("tenants.session.csrf_failure")
    assert (row.outcome, row.actor_name, row.target_id) == ("denied", "frank", "/logout/")
    assert row.details["surface"] == "console"
    assert row.details["method"] == "POST"
    assert row.details["origin"] == "https://evil.example.net"
    assert row.details["referer"] == "https://evil.example.net/page?token=[redacted]"
    assert not _rows("tenants.session.logout")  # the request was refused, not executed


def test_an_api_csrf_failure_is_audited_and_stays_a_403_json_error(tenant_a, admin_a) -> None:
    api = APIClient(enforce_csrf_checks=True)
    api.force_login(admin_a)
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/roles",
        {"name": "ops", "title": "Ops", "permissions": ["caches.get"]},
        format="json",
        REMOTE_ADDR=ATTACKER,
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    [row] = _rows("tenants.session.csrf_failure")
    assert (row.outcome, row.actor_name, row.details["surface"]) == ("denied", "alice", "api")
    assert not _rows("tenants.role.create")
