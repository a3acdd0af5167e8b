"""Tenants' provider keys: sealed at rest (MultiFernet, key rotation), never returned or
logged, audited on set and rotate; the gateway sends the tenant's own key."""

from __future__ import annotations

import logging

import anthropic
import pytest
from cryptography.fernet import Fernet

from tests.providers.conftest import ANTHROPIC_KEY
from tests.providers.support import D, anthropic_client, openai_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_key_is_sealed_audited_redacted_and_sent_as_the_tenants(live_server_url, hosted):
    from audit.models import AuditEvent
    from gateway.models import ProviderCredential

    row = ProviderCredential.objects.get(tenant=hosted["tenant"], provider="anthropic")
    assert ANTHROPIC_KEY not in row.secret_sealed
    event = AuditEvent.objects.get(
        tenant=hosted["tenant"], action="gateway.provider_credential.set", target_id=str(row.pk)
    )
    assert event.changes["secret_sealed"]["after"] == "[redacted]"
    assert ANTHROPIC_KEY not in str(event.changes)
    anthropic_client(live_server_url, hosted["key"]).messages.create(
        model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": D(2)}]
    )
    assert hosted["anthropic"].received[-1]["x-api-key"] == ANTHROPIC_KEY


def test_a_second_set_rotates_and_the_old_key_is_no_longer_sent(live_server_url, hosted):
    from audit.models import AuditEvent
    from gateway.provider_credentials import provider_credential_set

    hosted["anthropic"].api_keys.add("sk-ant-rotated-key")
    provider_credential_set(
        tenant=hosted["tenant"],
        actor=hosted["actor"],
        provider="anthropic",
        secret="sk-ant-rotated-key",
    )
    assert AuditEvent.objects.filter(
        tenant=hosted["tenant"], action="gateway.provider_credential.rotate"
    ).exists()
    anthropic_client(live_server_url, hosted["key"]).messages.create(
        model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": D(2)}]
    )
    assert hosted["anthropic"].received[-1]["x-api-key"] == "sk-ant-rotated-key"


def test_a_tenant_without_a_key_gets_a_clear_400_and_nothing_is_sent(live_server_url, hosted):
    from gateway.provider_credentials import provider_credential_delete, provider_credential_get

    credential = provider_credential_get(tenant=hosted["tenant"], provider="anthropic")
    provider_credential_delete(credential=credential, actor=hosted["actor"])
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client(live_server_url, hosted["key"]).messages.create(
            model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert raised.value.body["error"]["code"] == "provider_not_configured"
    assert raised.value.body["type"] == "error"  # Anthropic's error shape on /v1/messages
    assert hosted["anthropic"].received == []


def test_rotating_the_encryption_key_reseals_every_row(hosted, settings):
    from gateway import credentials
    from gateway.models import ProviderCredential
    from gateway.provider_credentials import provider_credentials_reseal_all_tenants

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = old
    sealed = credentials.seal("sk-some-secret-1")
    ProviderCredential.objects.filter(tenant=hosted["tenant"]).update(secret_sealed=sealed)
    settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = f"{new},{old}"
    assert provider_credentials_reseal_all_tenants(actor=hosted["actor"]) == 3
    settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = new  # the old key dropped
    for row in ProviderCredential.objects.filter(tenant=hosted["tenant"]):
        assert credentials.unseal(row.secret_sealed) == "sk-some-secret-1"


def test_a_bad_key_is_refused_before_anything_is_written(hosted):
    from gateway.models import ProviderCredential
    from gateway.provider_credentials import InvalidProviderCredential, provider_credential_set

    before = list(ProviderCredential.objects.filter(tenant=hosted["tenant"]).values())
    for provider, secret in (
        ("anthropic", "short"),
        ("openai", "has space in it"),
        ("x", "k" * 20),
    ):
        with pytest.raises(InvalidProviderCredential):
            provider_credential_set(
                tenant=hosted["tenant"], actor=hosted["actor"], provider=provider, secret=secret
            )
    assert list(ProviderCredential.objects.filter(tenant=hosted["tenant"]).values()) == before


def test_no_key_reaches_a_log_on_rotation_through_the_api_or_on_a_request(
    live_server_url, hosted, api, caplog
):
    from tests.providers.conftest import OPENAI_KEY

    caplog.set_level(logging.DEBUG)
    rotated = "sk-ant-rotated-through-api"
    hosted["anthropic"].api_keys.add(rotated)
    api.force_login(hosted["admin"])
    response = api.put(
        f"/api/v1/tenants/{hosted['tenant'].slug}/provider-credentials/anthropic",
        {"api_key": rotated},
        format="json",
    )
    assert response.status_code == 200, response.content
    anthropic_client(live_server_url, hosted["key"]).messages.create(
        model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": D(2)}]
    )
    openai_client(live_server_url, hosted["key"]).chat.completions.create(
        model="gpt-4o", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert hosted["anthropic"].received[-1]["x-api-key"] == rotated
    assert caplog.records  # the capture saw the request's logging at all
    logged = caplog.text + "".join(str(r.args) + str(r.__dict__) for r in caplog.records)
    for secret in (rotated, ANTHROPIC_KEY, OPENAI_KEY):
        assert secret not in logged


def test_an_add_never_replaces_a_key_and_a_change_to_a_removed_key_is_a_404(hosted):
    """``replace=False`` (the console's add) refuses an existing key under its row lock;
    an update or delete of a row removed in between is a 404 with no audit row."""
    from audit.models import AuditEvent
    from gateway.models import ProviderCredential
    from gateway.provider_credentials import (
        ProviderCredentialExists,
        ProviderCredentialNotFound,
        provider_credential_delete,
        provider_credential_set,
        provider_credential_update,
    )

    row = ProviderCredential.objects.get(tenant=hosted["tenant"], provider="openai")
    with pytest.raises(ProviderCredentialExists) as exists:
        provider_credential_set(
            tenant=hosted["tenant"],
            actor=hosted["actor"],
            provider="openai",
            secret="sk-another-key-1",
            replace=False,
        )
    assert exists.value.http_status == 409 and exists.value.details["field"] == "provider"
    assert (
        ProviderCredential.objects.get(tenant=hosted["tenant"], pk=row.pk).fingerprint
        == row.fingerprint
    )
    ProviderCredential.objects.filter(
        tenant=hosted["tenant"], pk=row.pk
    ).delete()  # another admin removed it
    audited = AuditEvent.objects.filter(tenant=hosted["tenant"]).count()
    with pytest.raises(ProviderCredentialNotFound):
        provider_credential_update(credential=row, actor=hosted["actor"], cache_autopilot=False)
    with pytest.raises(ProviderCredentialNotFound):
        provider_credential_delete(credential=row, actor=hosted["actor"])
    assert AuditEvent.objects.filter(tenant=hosted["tenant"]).count() == audited
