"""The provider-credential REST API: keys go in, never come out (responses, logs, audit);
viewers read, only ``provider_credentials.set`` writes; another tenant gets 404; bad input
is a 400 with a stable code and writes nothing."""

from __future__ import annotations

import logging

import pytest

from audit.models import AuditEvent
from gateway.models import ProviderCredential
from tests.factories import HumanFactory, bind

pytestmark = pytest.mark.django_db

SECRET = "sk-ant-api-secret-0123456789"
ROTATED = "sk-ant-api-rotated-9876543210"


def _url(tenant, provider: str | None = None) -> str:
    base = f"/api/v1/tenants/{tenant.slug}/provider-credentials"
    return f"{base}/{provider}" if provider else base


def _put(api, tenant, secret: str = SECRET, provider: str = "anthropic", **extra):
    return api.put(_url(tenant, provider), {"api_key": secret, **extra}, format="json")


def test_set_rotate_list_switch_and_delete_never_show_the_key(api, tenant_a, admin_a, caplog):
    caplog.set_level(logging.DEBUG)
    api.force_login(admin_a)
    created = _put(api, tenant_a)
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["provider"] == "anthropic"
    assert body["cache_autopilot"] is True
    assert body["rotated_at"] is None
    assert len(body["fingerprint"]) == 12
    rotated = _put(api, tenant_a, ROTATED, cache_autopilot=False)
    assert rotated.status_code == 200, rotated.content
    assert rotated.json()["fingerprint"] != body["fingerprint"]
    assert rotated.json()["rotated_at"] is not None
    assert rotated.json()["cache_autopilot"] is False
    listed = api.get(_url(tenant_a))
    assert listed.status_code == 200
    assert [r["provider"] for r in listed.json()] == ["anthropic"]
    switched = api.patch(_url(tenant_a, "anthropic"), {"cache_autopilot": True}, format="json")
    assert switched.status_code == 200 and switched.json()["cache_autopilot"] is True
    assert switched.json()["rotated_at"] == rotated.json()["rotated_at"]  # a switch is no rotation
    one = api.get(_url(tenant_a, "anthropic"))
    responses = [created, rotated, listed, switched, one]
    for response in responses:
        assert SECRET not in response.content.decode()
        assert ROTATED not in response.content.decode()
        assert "secret" not in response.content.decode()
    logged = caplog.text + "".join(str(r.args) + str(r.__dict__) for r in caplog.records)
    assert SECRET not in logged and ROTATED not in logged
    actions = list(
        AuditEvent.objects.filter(tenant=tenant_a, target_type="provider_credential")
        .order_by("seq")
        .values_list("action", flat=True)
    )
    assert actions == [
        "gateway.provider_credential.set",
        "gateway.provider_credential.rotate",
        "gateway.provider_credential.update",
    ]
    assert SECRET not in str(list(AuditEvent.objects.values("changes", "details")))
    deleted = api.delete(_url(tenant_a, "anthropic"))
    assert deleted.status_code == 204
    assert not ProviderCredential.objects.filter(tenant=tenant_a).exists()
    assert api.get(_url(tenant_a, "anthropic")).json()["error"]["code"] == (
        "provider_credential_not_found"
    )


def test_another_tenant_gets_404_and_changes_nothing(api, tenant_a, admin_a, admin_b):
    api.force_login(admin_a)
    assert _put(api, tenant_a).status_code == 201
    before = list(ProviderCredential.objects.filter(tenant=tenant_a).values())
    api.force_login(admin_b)
    for response in (
        api.get(_url(tenant_a)),
        api.get(_url(tenant_a, "anthropic")),
        _put(api, tenant_a, ROTATED),
        api.patch(_url(tenant_a, "anthropic"), {"cache_autopilot": False}, format="json"),
        api.delete(_url(tenant_a, "anthropic")),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert list(ProviderCredential.objects.filter(tenant=tenant_a).values()) == before


def test_a_viewer_reads_but_cannot_set_switch_or_delete(api, tenant_a, admin_a):
    api.force_login(admin_a)
    assert _put(api, tenant_a).status_code == 201
    before = list(ProviderCredential.objects.filter(tenant=tenant_a).values())
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    api.force_login(viewer)
    assert api.get(_url(tenant_a)).status_code == 200
    for response in (
        _put(api, tenant_a, ROTATED),
        _put(api, tenant_a, provider="openai"),
        api.patch(_url(tenant_a, "anthropic"), {"cache_autopilot": False}, format="json"),
        api.delete(_url(tenant_a, "anthropic")),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "permission_denied"
    assert list(ProviderCredential.objects.filter(tenant=tenant_a).values()) == before


@pytest.mark.parametrize(
    ("provider", "body", "code"),
    [
        ("anthropic", {"api_key": "short"}, "invalid_provider_credential"),
        ("anthropic", {"api_key": "has a space in it"}, "invalid_provider_credential"),
        ("anthropic", {"api_key": "sk-ctl\u0007char-key"}, "invalid_provider_credential"),
        ("vertex", {"api_key": SECRET}, "invalid_provider_credential"),
        ("anthropic", {"api_key": "k" * 513}, "invalid_input"),
        ("anthropic", {}, "invalid_input"),
        ("anthropic", {"api_key": SECRET, "cache_autopilot": "maybe"}, "invalid_input"),
    ],
)
def test_bad_input_is_a_400_with_a_stable_code_and_writes_nothing(
    api, tenant_a, admin_a, provider, body, code
):
    api.force_login(admin_a)
    response = api.put(_url(tenant_a, provider), body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code
    assert SECRET not in response.content.decode()
    assert not ProviderCredential.objects.filter(tenant=tenant_a).exists()
    assert not AuditEvent.objects.filter(
        tenant=tenant_a, target_type="provider_credential"
    ).exists()


def test_switching_a_provider_without_a_key_is_a_404(api, tenant_a, admin_a):
    api.force_login(admin_a)
    response = api.patch(_url(tenant_a, "openai"), {"cache_autopilot": False}, format="json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "provider_credential_not_found"
    bad = api.patch(_url(tenant_a, "openai"), {"cache_autopilot": None}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_input"


def test_listing_costs_a_fixed_number_of_queries(
    api, tenant_a, admin_a, django_assert_max_num_queries
):
    api.force_login(admin_a)
    for provider in ("anthropic", "openai", "deepseek"):
        assert _put(api, tenant_a, provider=provider).status_code == 201
    with django_assert_max_num_queries(8):
        response = api.get(_url(tenant_a))
    assert [r["provider"] for r in response.json()] == ["anthropic", "deepseek", "openai"]


def test_an_unknown_provider_in_the_path_is_a_clean_404_or_400(api, tenant_a, admin_a):
    api.force_login(admin_a)
    for path in ("no-such", "anthropic\x00", "a" * 300):
        assert api.get(_url(tenant_a, path)).status_code == 404
        assert api.delete(_url(tenant_a, path)).status_code == 404
        response = _put(api, tenant_a, provider=path)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_provider_credential"
