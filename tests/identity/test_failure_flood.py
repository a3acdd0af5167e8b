"""Unauthenticated failures are coalesced per source, and logins lock by source too."""

from __future__ import annotations

import secrets
import time

import pytest
from django.test import Client

from audit.models import AuditEvent
from tests.factories import HumanFactory

pytestmark = pytest.mark.django_db

TOKEN = "m" * 40
ATTACKER = "198.51.100.7"
NEIGHBOUR = "198.51.100.8"


@pytest.fixture
def short_window(monkeypatch) -> int:
    """A one-second coalescing window, so a test can wait for the next one (Redis expires
    the gate itself: nothing is reset by hand)."""
    monkeypatch.setattr("tenants.services.failures.REFUSAL_AUDIT_SECONDS", 1)
    return 1


def _next_window(seconds: int) -> None:
    time.sleep(seconds + 0.2)


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


def test_the_next_window_s_metrics_row_carries_the_count_of_the_coalesced_failures(
    settings, short_window
) -> None:
    settings.CACHEPLANE_METRICS_TOKEN = TOKEN
    client = Client()
    for _ in range(30):
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong", REMOTE_ADDR=ATTACKER)
    _next_window(short_window)

    client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong", REMOTE_ADDR=ATTACKER)

    rows = AuditEvent.objects.filter(action="controlplane.metrics.scrape").order_by("seq")
    # The first failure is written at once; the 29 after it in that window and the one
    # that opened the next window are the second row's count: none is lost.
    assert [(r.source_ip, r.details["failures"]) for r in rows] == [(ATTACKER, 1), (ATTACKER, 30)]
    assert rows[1].details["window_seconds"] == short_window


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


def test_the_next_window_s_login_row_carries_the_count_and_the_last_username(
    settings, short_window
) -> None:
    settings.CACHEPLANE_LOGIN_SOURCE_FAILURE_LIMIT = 100  # counting, not locking, here
    client = Client()
    for attempt in range(10):
        answer = client.post(
            "/login/", {"username": f"user-{attempt}", "password": "guess"}, REMOTE_ADDR=ATTACKER
        )
        assert answer.status_code == 200
    _next_window(short_window)

    client.post("/login/", {"username": "last-try", "password": "guess"}, REMOTE_ADDR=ATTACKER)

    rows = AuditEvent.objects.filter(action="tenants.session.login").order_by("seq")
    assert [(r.outcome, r.target_id, r.details["failures"]) for r in rows] == [
        ("failed", "user-0", 1),
        ("failed", "last-try", 10),
    ]
    assert {r.source_ip for r in rows} == {ATTACKER}
