"""Console management forms through the Django test client: the same services, errors next
to their fields, nothing written on bad input, the same audit rows as the API."""

from __future__ import annotations

import pytest
from django.test import Client

from audit.models import AuditEvent
from tenants.models import RoleBinding
from tenants.services import iam
from tests.factories import HumanFactory, bind

pytestmark = pytest.mark.django_db


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _rows(tenant) -> dict:
    policy = iam.policy_get(tenant=tenant)
    data = {"etag": policy.etag, "rows": str(len(policy.bindings))}
    for i, b in enumerate(policy.bindings):
        data[f"b-{i}-role"] = b.role.name
        data[f"b-{i}-principal"] = str(b.principal_id)
        data[f"b-{i}-principal_name"] = b.principal.username
    return data


def test_a_stale_etag_is_a_409_that_shows_the_current_policy_and_writes_nothing(
    admin_a, tenant_a
) -> None:
    client = _login(admin_a)
    stale = _rows(tenant_a)
    dev = HumanFactory(username="dev9")
    client.post(
        f"/t/{tenant_a.slug}/access/members", {"principal": "dev9", "role": "tenant.viewer"}
    )
    assert RoleBinding.objects.filter(principal=dev).exists()
    before = AuditEvent.objects.count()
    response = client.post(f"/t/{tenant_a.slug}/access/policy", stale)
    assert response.status_code == 409
    html = response.content.decode()
    assert 'id="etag-conflict"' in html and "dev9" in html
    assert RoleBinding.objects.filter(principal=dev).exists()  # not overwritten
    assert AuditEvent.objects.count() == before


def test_member_add_with_an_unknown_name_shows_the_error_next_to_the_field(
    admin_a, tenant_a
) -> None:
    before = RoleBinding.objects.count()
    response = _login(admin_a).post(
        f"/t/{tenant_a.slug}/access/members", {"principal": "nobody", "role": "tenant.viewer"}
    )
    assert response.status_code == 400
    assert "unknown_principal" in response.content.decode()
    assert RoleBinding.objects.count() == before


def test_a_budget_named_with_markup_is_refused_by_console_and_api_alike(admin_a, tenant_a):
    from billing.models import Budget

    client = _login(admin_a)
    response = client.post(
        f"/t/{tenant_a.slug}/budgets/new",
        {"name": "<script>", "period": "month", "limit_usd": "5", "thresholds": "50"},
    )
    assert response.status_code == 400 and "angle brackets" in response.content.decode()
    api = client.post(
        f"/api/v1/tenants/{tenant_a.slug}/budgets",
        {"name": "<script>", "period": "month", "limit_micros": 5},
        content_type="application/json",
    )
    assert api.status_code == 400
    assert not Budget.objects.all_tenants().exists()


def test_a_viewer_posting_a_key_form_is_refused_and_audited(tenant_a) -> None:
    from tenants.models import ApiKey

    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    response = _login(viewer).post(f"/t/{tenant_a.slug}/keys/new", {"name": "x"})
    assert response.status_code == 403
    assert not ApiKey.objects.all_tenants().exists()
    assert AuditEvent.objects.filter(tenant=tenant_a, outcome="denied").exists()
