"""API keys: format, hashing at rest, constant-time lookup path, expiry and revocation bound."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.errors import ApiKeyRejected, EscalationDenied
from tenants.models import ApiKey, TenantState
from tenants.services import keys
from tenants.services.tenants import tenant_set_state
from tests.factories import HumanFactory, ServiceAccountFactory, actor_for, bind

pytestmark = pytest.mark.django_db


def _issue(tenant, admin, **kwargs) -> keys.IssuedKey:
    return keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="ci", **kwargs)


def test_key_has_fixed_prefix_and_valid_checksum_and_only_a_digest_is_stored(
    tenant_a, admin_a
) -> None:
    issued = _issue(tenant_a, admin_a)
    token = issued.plaintext
    assert token.startswith("cpk_") and len(token) == keys.KEY_LENGTH
    assert keys.key_is_well_formed(token)
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert not keys.key_is_well_formed(flipped)
    row = ApiKey.objects.all_tenants().get(pk=issued.key.pk)
    assert token not in {row.digest, row.prefix, row.name}
    assert row.digest == keys.key_digest(token)
    assert row.prefix == token[: keys.DISPLAY_PREFIX_LEN]


def test_authentication_returns_principal_and_tenant_and_records_last_use(
    tenant_a, admin_a
) -> None:
    issued = _issue(tenant_a, admin_a)
    result = keys.api_key_authenticate(issued.plaintext)
    assert result.principal == admin_a and result.tenant == tenant_a
    assert ApiKey.objects.all_tenants().get(pk=issued.key.pk).last_used_at is not None


@pytest.mark.parametrize(
    ("token", "code"),
    [("cpk_short", "invalid_api_key"), ("", "invalid_api_key"), ("x" * 42, "invalid_api_key")],
)
def test_malformed_tokens_are_rejected(token: str, code: str) -> None:
    with pytest.raises(ApiKeyRejected) as raised:
        keys.api_key_authenticate(token)
    assert raised.value.code == code


def test_well_formed_but_unknown_key_is_rejected(db) -> None:
    with pytest.raises(ApiKeyRejected) as raised:
        keys.api_key_authenticate(keys.key_generate())
    assert raised.value.code == "invalid_api_key"


def test_expired_key_is_rejected(tenant_a, admin_a) -> None:
    issued = _issue(tenant_a, admin_a, expires_at=timezone.now() + timedelta(hours=1))
    ApiKey.objects.all_tenants().filter(pk=issued.key.pk).update(
        expires_at=timezone.now() - timedelta(1)
    )
    with pytest.raises(ApiKeyRejected) as raised:
        keys.api_key_authenticate(issued.plaintext)
    assert raised.value.code == "api_key_expired"


def test_revoked_key_is_refused_within_the_bound_even_when_cached(tenant_a, admin_a) -> None:
    issued = _issue(tenant_a, admin_a)
    keys.api_key_authenticate(issued.plaintext)  # now cached in this process
    # Another process revokes it: this process's cache does not hear about it...
    ApiKey.objects.all_tenants().filter(pk=issued.key.pk).update(revoked_at=timezone.now())
    start = keys.key_cache.clock()
    keys.key_cache.clock = lambda: start + keys.KEY_CACHE_SECONDS - 0.5
    try:
        keys.api_key_authenticate(issued.plaintext)  # still inside the documented bound
        keys.key_cache.clock = lambda: start + keys.KEY_CACHE_SECONDS
        with pytest.raises(ApiKeyRejected) as raised:
            keys.api_key_authenticate(issued.plaintext)
    finally:
        import time

        keys.key_cache.clock = time.monotonic
    assert raised.value.code == "api_key_revoked"


def test_revocation_in_this_process_is_immediate(
    tenant_a, admin_a, django_capture_on_commit_callbacks
) -> None:
    issued = _issue(tenant_a, admin_a)
    keys.api_key_authenticate(issued.plaintext)
    with django_capture_on_commit_callbacks(execute=True):
        keys.api_key_revoke(actor=actor_for(admin_a), tenant=tenant_a, key_id=str(issued.key.pk))
    with pytest.raises(ApiKeyRejected) as raised:
        keys.api_key_authenticate(issued.plaintext)
    assert raised.value.code == "api_key_revoked"


def test_suspended_tenant_refuses_its_keys(
    tenant_a, admin_a, platform_admin, django_capture_on_commit_callbacks
) -> None:
    issued = _issue(tenant_a, admin_a)
    keys.api_key_authenticate(issued.plaintext)
    with django_capture_on_commit_callbacks(execute=True):
        tenant_set_state(
            actor=actor_for(platform_admin), tenant=tenant_a, state=TenantState.SUSPENDED
        )
    with pytest.raises(ApiKeyRejected) as raised:
        keys.api_key_authenticate(issued.plaintext)
    assert raised.value.code == "tenant_suspended"


def test_key_for_a_more_powerful_service_account_is_escalation(tenant_a) -> None:
    sa = ServiceAccountFactory(tenant=tenant_a)
    bind(sa, "tenant.admin", tenant_a)
    key_maker = HumanFactory()
    bind(key_maker, "tenant.developer", tenant_a)
    from tenants.models import Role

    role = Role.objects.create(
        tenant=tenant_a,
        name="keyMaker",
        title="Key maker",
        permissions=["keys.create", "inference.invoke"],
    )
    from tenants.models import RoleBinding

    RoleBinding.objects.create(tenant=tenant_a, principal=key_maker, role=role)
    from tenants.services.authorization import principal_permissions_forget

    principal_permissions_forget(key_maker)
    with pytest.raises(EscalationDenied):
        _issue(tenant_a, key_maker, principal=sa)
    assert not ApiKey.objects.all_tenants().filter(principal=sa).exists()


def test_plaintext_key_never_reaches_logs_or_audit(tenant_a, admin_a, caplog) -> None:
    from audit.models import AuditEvent

    caplog.set_level(logging.DEBUG)
    issued = _issue(tenant_a, admin_a)
    keys.api_key_authenticate(issued.plaintext)
    assert issued.plaintext not in caplog.text
    for event in AuditEvent.objects.all():
        assert issued.plaintext not in str(event.changes) + str(event.details)
