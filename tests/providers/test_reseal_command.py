"""``cacheplane provider-credentials-reseal``: moves every tenant's sealed key to the
newest encryption key (audited once), and changes nothing when a row cannot be opened."""

from __future__ import annotations

from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from gateway import credentials
from gateway.models import ProviderCredential
from gateway.provider_credentials import provider_credential_set
from tests.factories import actor_for

pytestmark = pytest.mark.django_db


def test_the_command_reseals_every_tenants_keys_under_the_newest_key(
    tenant_a, tenant_b, admin_a, admin_b, settings
):
    from audit.models import AuditEvent

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = old
    provider_credential_set(
        tenant=tenant_a, actor=actor_for(admin_a), provider="anthropic", secret="sk-a-secret-1"
    )
    provider_credential_set(
        tenant=tenant_b, actor=actor_for(admin_b), provider="openai", secret="sk-b-secret-2"
    )
    settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = f"{new},{old}"
    out = StringIO()
    call_command("provider_credentials_reseal", stdout=out)
    assert "resealed 2" in out.getvalue()
    event = AuditEvent.objects.get(action="gateway.provider_credential.reseal")
    assert event.tenant_id is None and event.details["resealed"] == 2
    settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = new  # the old key dropped
    opened = {
        row.provider: credentials.unseal(row.secret_sealed)
        for row in ProviderCredential.objects.all_tenants()
    }
    assert opened == {"anthropic": "sk-a-secret-1", "openai": "sk-b-secret-2"}
    assert "sk-a-secret-1" not in out.getvalue()


def test_a_row_no_key_opens_fails_the_command_and_changes_nothing(tenant_a, admin_a, settings):
    settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = Fernet.generate_key().decode()
    provider_credential_set(
        tenant=tenant_a, actor=actor_for(admin_a), provider="deepseek", secret="sk-lost-key-3"
    )
    before = list(ProviderCredential.objects.filter(tenant=tenant_a).values())
    settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = Fernet.generate_key().decode()
    with pytest.raises(CommandError, match="nothing was changed"):
        call_command("provider_credentials_reseal", stdout=StringIO())
    assert list(ProviderCredential.objects.filter(tenant=tenant_a).values()) == before
