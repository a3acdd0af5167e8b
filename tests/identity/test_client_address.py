"""The client address behind proxies: X-Forwarded-For believed from trusted proxies only.

Throttles and audit rows use ``tenants.authentication.client_address``; the live server
runs uvicorn with ``--forwarded-allow-ips`` set as ``cacheplane up`` sets it.
"""

from __future__ import annotations

import httpx
import pytest

from audit.models import AuditEvent
from controlplane.up_processes import core_children, forwarded_allow_ips
from tenants.authentication import client_address
from tenants.services import keys
from tests.factories import actor_for

ATTACKER = "198.51.100.7"
NEIGHBOUR = "198.51.100.8"
PROXY = "10.1.2.3"


@pytest.fixture
def strict(settings):
    settings.CACHEPLANE_API_KEY_FAILURE_LIMIT = 3
    settings.CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS = 300
    settings.CACHEPLANE_API_KEY_LOCKOUT_SECONDS = 600
    return settings


def _get(api, tenant, token: str, *, peer: str, forwarded: str | None = None):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
    return api.get(
        f"/api/v1/tenants/{tenant.slug}/iam-policy",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        REMOTE_ADDR=peer,
        **extra,
    )


@pytest.mark.django_db
def test_rotating_x_forwarded_for_from_an_untrusted_peer_does_not_escape_the_lock(
    api, strict, tenant_a, admin_a
) -> None:
    valid = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="real").plaintext
    for n in range(3):
        guess = _get(api, tenant_a, keys.key_generate(), peer=ATTACKER, forwarded=f"203.0.113.{n}")
        assert guess.status_code == 401

    locked = _get(api, tenant_a, valid, peer=ATTACKER, forwarded="203.0.113.99")

    assert locked.status_code == 429 and locked.json()["error"]["code"] == "too_many_failures"
    failures = AuditEvent.objects.filter(action="tenants.api_key.authenticate")
    assert {e.source_ip for e in failures} == {ATTACKER}


@pytest.mark.django_db
def test_a_trusted_proxys_forwarded_address_is_honoured_and_client_hops_are_not(
    api, strict, tenant_a
) -> None:
    strict.CACHEPLANE_TRUSTED_PROXIES = ["10.0.0.0/8"]
    # The client wrote "6.6.6.6" itself; the proxy appended the address it saw.
    _get(api, tenant_a, keys.key_generate(), peer=PROXY, forwarded=f"6.6.6.6, {ATTACKER}")

    failure = AuditEvent.objects.get(action="tenants.api_key.authenticate")
    assert failure.source_ip == ATTACKER and failure.details["entry_point"] == "api"


@pytest.mark.django_db
def test_one_sources_failures_behind_the_proxy_do_not_lock_out_another_sources_valid_key(
    api, strict, tenant_a, admin_a
) -> None:
    strict.CACHEPLANE_TRUSTED_PROXIES = ["10.0.0.0/8"]
    valid = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="real").plaintext
    for _ in range(3):
        assert (
            _get(api, tenant_a, keys.key_generate(), peer=PROXY, forwarded=ATTACKER).status_code
            == 401
        )

    assert _get(api, tenant_a, valid, peer=PROXY, forwarded=NEIGHBOUR).status_code == 200
    assert _get(api, tenant_a, valid, peer=PROXY, forwarded=ATTACKER).status_code == 429
    lockout = AuditEvent.objects.get(action="tenants.api_key.lockout")
    assert lockout.target_id == ATTACKER


def test_client_address_walks_forwarded_hops_from_the_right(settings) -> None:
    settings.CACHEPLANE_TRUSTED_PROXIES = ["10.0.0.0/8", "192.168.1.1"]
    assert client_address(peer="10.0.0.5", forwarded_for="1.1.1.1, 2.2.2.2, 192.168.1.1") == (
        "2.2.2.2"
    )
    assert client_address(peer="10.0.0.5", forwarded_for="not-an-ip") == "10.0.0.5"
    assert client_address(peer="10.0.0.5", forwarded_for=None) == "10.0.0.5"
    assert client_address(peer="8.8.8.8", forwarded_for="1.1.1.1") == "8.8.8.8"
    settings.CACHEPLANE_TRUSTED_PROXIES = []
    assert client_address(peer="127.0.0.1", forwarded_for="1.1.1.1") == "127.0.0.1"


def test_cacheplane_up_sets_uvicorns_forwarded_allow_ips_explicitly(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("CACHEPLANE_TRUSTED_PROXIES", raising=False)
    web = core_children(
        python="python", host="127.0.0.1", port=8000, logs=tmp_path, data_dir=tmp_path
    )[0]
    assert web.argv[web.argv.index("--forwarded-allow-ips") + 1] == ""
    monkeypatch.setenv("CACHEPLANE_TRUSTED_PROXIES", "10.0.0.0/8,192.168.1.1")
    assert forwarded_allow_ips() == "10.0.0.0/8,192.168.1.1"


@pytest.mark.django_db(transaction=True)
def test_the_live_server_ignores_x_forwarded_for_from_localhost(live_server_url, tenant_a) -> None:
    response = httpx.get(
        f"{live_server_url}/api/v1/tenants/{tenant_a.slug}",
        headers={"Authorization": f"Bearer {keys.key_generate()}", "X-Forwarded-For": ATTACKER},
    )

    assert response.status_code == 401
    failure = AuditEvent.objects.get(action="tenants.api_key.authenticate")
    assert failure.source_ip == "127.0.0.1"


@pytest.mark.django_db(transaction=True)
def test_the_cached_gateway_identity_stamps_each_refusal_with_its_own_requests_source(
    live_server_url, tenant_keys, fresh_gateway
) -> None:
    key = tenant_keys["gw-acme"]["key"]
    first = httpx.get(
        f"{live_server_url}/v1/models",
        headers={"Authorization": f"Bearer {key}", "User-Agent": "first-client/1.0"},
    )
    assert first.status_code == 200

    refused = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", "User-Agent": "second-client/2.0"},
        json={
            "model": "any",
            "messages": [{"role": "user", "content": "hi"}],
            "cache_salt": "mine",
        },
    )

    assert refused.status_code == 400
    row = AuditEvent.objects.get(action="gateway.cache_salt.refuse")
    assert row.user_agent == "second-client/2.0"
