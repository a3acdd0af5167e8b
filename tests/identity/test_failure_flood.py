"""Unauthenticated failures are coalesced per source, and logins lock by source too."""

from __future__ import annotations

import secrets

import pytest
from django.test import Client

from audit.models import AuditEvent
from tests.factories import HumanFactory

pytestmark = pytest.mark.django_db

TOKEN = "m" * 40
ATTACKER = "198.51.100.7"
NEIGHBOUR = "198.51.100.8"


def test_a_hundred_wrong_metrics_tokens_write_one_row_with_the_count(settings) -> None:
    settings.CACHEPLANE_METRICS_TOKEN = TOKEN
    client = Client()
    for _ in range(100):
        wrong = client.get(
            "/metrics", HTTP_AUTHORIZATION=f"Bearer {secrets.token_hex(20)}", REMOTE_ADDR=ATTACKER
        )
        assert wrong.status_code == 401

    rows = AuditEvent.objects.filter(action="controlplane.metrics.scrape")
    assert [(r.source_ip, r.details["failures"]) for r in rows] == [(ATTACKER, 1)]
    # Another source gets its own row.
    client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope", REMOTE_ADDR=NEIGHBOUR)
    assert AuditEvent.objects.filter(action="controlplane.metrics.scrape").count() == 2


def test_forty_failed_logins_with_random_usernames_lock_the_source_and_barely_grow_the_chain(
    settings,
) -> None:
    settings.CACHEPLANE_LOGIN_SOURCE_FAILURE_LIMIT = 20
    HumanFactory(username="victim", password="the-right-password-1")
    client = Client()
    answers = [
        client.post(
            "/login/",
            {"username": f"user-{secrets.token_hex(4)}", "password": "guess"},
            REMOTE_ADDR=ATTACKER,
        ).status_code
        for _ in range(40)
    ]

    assert answers[:20] == [200] * 20  # the form again
    assert set(answers[20:]) == {429}
    assert AuditEvent.objects.filter(action="tenants.session.login").count() == 1
    lockout = AuditEvent.objects.get(action="tenants.session.lockout")
    assert (lockout.source_ip, lockout.details["failures"]) == (ATTACKER, 20)
    # Locked by source: even the right password of a real account is refused from there...
    refused = client.post(
        "/login/", {"username": "victim", "password": "the-right-password-1"}, REMOTE_ADDR=ATTACKER
    )
    assert refused.status_code == 429
    # ...and not from another address.
    other = Client()
    ok = other.post(
        "/login/",
        {"username": "victim", "password": "the-right-password-1"},
        REMOTE_ADDR=NEIGHBOUR,
    )
    assert ok.status_code == 302
