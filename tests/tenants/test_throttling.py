"""API-key guessing is counted per source and locked out, over REST and the gateway; audited."""

from __future__ import annotations

import httpx
import pytest

from audit.models import AuditEvent
from tenants.services import keys
from tenants.services.throttling import throttle_source
from tests.factories import actor_for

ATTACKER = "198.51.100.7"
NEIGHBOUR = "198.51.100.8"


@pytest.fixture
def strict(settings):
    settings.CACHEPLANE_API_KEY_FAILURE_LIMIT = 3
    settings.CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS = 300
    settings.CACHEPLANE_API_KEY_LOCKOUT_SECONDS = 600
    return settings


def _get(api, tenant, token: str, ip: str):
    return api.get(
        f"/api/v1/tenants/{tenant.slug}/iam-policy",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        REMOTE_ADDR=ip,
    )


@pytest.mark.django_db
def test_guessed_keys_lock_the_source_out_with_429_and_retry_after(
    api, strict, tenant_a, admin_a
) -> None:
    valid = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="real").plaintext
    for _ in range(3):
        assert _get(api, tenant_a, keys.key_generate(), ATTACKER).status_code == 401
    lockouts = AuditEvent.objects.filter(action="tenants.api_key.lockout")
    assert [(e.outcome, e.source_ip, e.target_id, e.details["failures"]) for e in lockouts] == [
        ("denied", ATTACKER, ATTACKER, 3)
    ]

    # Locked: even a valid key is refused (a right guess must look like a wrong one).
    locked = _get(api, tenant_a, valid, ATTACKER)
    assert locked.status_code == 429
    assert locked.json()["error"]["code"] == "too_many_failures"
    assert 0 < int(locked["Retry-After"]) <= 600
    # Another address is not affected.
    assert _get(api, tenant_a, valid, NEIGHBOUR).status_code == 200

    # Refusals are audited, coalesced: one row per source per minute with the count.
    for _ in range(3):
        assert _get(api, tenant_a, keys.key_generate(), ATTACKER).status_code == 429
    throttled = AuditEvent.objects.filter(action="tenants.api_key.throttled")
    assert [(e.outcome, e.details["refused"]) for e in throttled] == [("denied", 1)]


@pytest.mark.django_db
def test_real_but_revoked_keys_are_not_guesses(api, strict, tenant_a, admin_a) -> None:
    issued = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="old")
    keys.api_key_revoke(actor=actor_for(admin_a), tenant=tenant_a, key_id=str(issued.key.pk))
    for _ in range(5):
        response = _get(api, tenant_a, issued.plaintext, ATTACKER)
        assert response.json()["error"]["code"] == "api_key_revoked"
    assert not AuditEvent.objects.filter(action="tenants.api_key.lockout").exists()


def test_ipv6_clients_are_counted_per_slash_64() -> None:
    assert throttle_source("2001:db8:1:2:aaaa::1") == throttle_source("2001:db8:1:2:ffff::9")
    assert throttle_source("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert throttle_source("::ffff:198.51.100.7") == ATTACKER
    assert throttle_source(None) == "unknown"


def test_the_gateway_answers_a_locked_source_with_429_too_many_failures(
    live_server_url, tenant_keys, strict
) -> None:
    url = f"{live_server_url}/v1/models"
    for _ in range(3):
        response = httpx.get(url, headers={"Authorization": f"Bearer {keys.key_generate()}"})
        assert response.status_code == 401
    valid = tenant_keys["gw-acme"]["key"]
    locked = httpx.get(url, headers={"Authorization": f"Bearer {valid}"})
    assert locked.status_code == 429
    assert locked.json()["error"]["code"] == "too_many_failures"
    assert locked.json()["error"]["type"] == "rate_limit_error"
    assert 0 < int(locked.headers["Retry-After"]) <= 600
    assert AuditEvent.objects.filter(
        action="tenants.api_key.lockout", source_ip="127.0.0.1"
    ).exists()
