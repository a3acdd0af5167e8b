"""#23.5 leftovers in identity's reach: long login names, webhook URLs shown to readers,
API keys in query strings."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from audit.models import AuditEvent
from billing.services.budget_crud import budget_create
from tenants.services import keys
from tests.factories import HumanFactory, TenantFactory, actor_for, bind

pytestmark = pytest.mark.django_db
HOOK = "https://hooks.example.com/services/T0/B0/s3cret-receiver-token"


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_a_login_name_over_255_characters_is_a_failed_login_not_a_500(path) -> None:
    response = Client(raise_request_exception=False).post(
        path, {"username": "x" * 300, "password": "whatever-password"}
    )

    assert response.status_code in (200, 400)
    assert AuditEvent.objects.filter(action="tenants.session.login", outcome="failed").exists()


@pytest.fixture
def budgeted():
    tenant = TenantFactory(slug="acme-legal")
    admin = HumanFactory(username="owner")
    bind(admin, "tenant.admin", tenant)
    viewer = HumanFactory(username="vic")
    bind(viewer, "tenant.viewer", tenant)
    budget_create(
        actor=actor_for(admin),
        tenant=tenant,
        name="monthly",
        period="month",
        limit_micros=10_000_000,
        webhook_url=HOOK,
    )
    return tenant, admin, viewer


def test_a_read_only_viewer_sees_a_webhooks_host_but_not_its_token(api, budgeted) -> None:
    tenant, admin, viewer = budgeted
    api.force_login(viewer)
    [row] = api.get(f"/api/v1/tenants/{tenant.slug}/budgets").json()["results"]
    assert row["webhook_url"] == "https://hooks.example.com/…"
    page = Client()
    page.force_login(viewer)
    html = page.get(f"/t/{tenant.slug}/budgets/").content.decode()
    assert "s3cret-receiver-token" not in html and "hooks.example.com/…" in html

    api.force_login(admin)  # a writer still sees (and can edit) the whole URL
    [row] = api.get(f"/api/v1/tenants/{tenant.slug}/budgets").json()["results"]
    assert row["webhook_url"] == HOOK


def test_an_api_key_in_a_query_string_is_never_logged_or_audited(api, budgeted, caplog) -> None:
    tenant, admin, _ = budgeted
    token = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="k").plaintext
    caplog.set_level(logging.DEBUG)
    client = Client(raise_request_exception=False)
    for path in (
        f"/api/v1/tenants/{tenant.slug}/budgets?api_key={token}",
        f"/api/v1/tenants/{tenant.slug}/budgets?key={token}&page=-1",
        f"/api/v1/platform/tenants?token={token}",
        f"/t/{tenant.slug}/?api_key={token}",
        f"/metrics?token={token}",
    ):
        client.get(path)
    secret = token.split("_")[-1]
    assert secret not in caplog.text
    rows = AuditEvent.objects.values_list("details", "target_id", "user_agent")
    assert all(secret not in str(row) for row in rows)
