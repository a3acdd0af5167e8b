"""The console's state bugs and messages, through the Django test client: the one-time key
reveal is POST-redirect-GET, a role-less service account gets no key, a seeded price's
long source can be corrected, an expired session's form post resumes on its page,
domain errors read in plain words under their field, Model is the catalog's select."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tenants.models import ApiKey
from tests.factories import HumanFactory, ServiceAccountFactory, bind

pytestmark = pytest.mark.django_db


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_new_keys_secret_is_shown_once_after_a_redirect_and_a_reload_creates_nothing(
    admin_a, tenant_a
) -> None:
    client = _login(admin_a)
    response = client.post(f"/t/{tenant_a.slug}/keys/new", {"name": "ci"})
    assert response.status_code == 302 and "/keys/?revealed=" in response["Location"]
    key = ApiKey.objects.get(tenant=tenant_a, name="ci")
    shown = client.get(response["Location"])
    html = shown.content.decode()
    assert 'id="new-key"' in html and f'value="{key.prefix}' in html
    assert shown["Cache-Control"] == "no-store"
    again = client.get(response["Location"]).content.decode()  # the reload
    assert 'id="new-key"' not in again and key.prefix + "…" in again
    assert 'id="reveal-gone"' in again
    assert ApiKey.objects.filter(tenant=tenant_a, name="ci").count() == 1


def test_a_key_for_a_service_account_without_a_role_is_refused_with_the_reason(
    admin_a, tenant_a
) -> None:
    account = ServiceAccountFactory(tenant=tenant_a)
    response = _login(admin_a).post(
        f"/t/{tenant_a.slug}/keys/new", {"name": "orphan", "principal": str(account.pk)}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_principal-error"' in html and "has no role in this tenant" in html
    assert not ApiKey.objects.filter(tenant=tenant_a).exists()


def test_a_seeded_price_with_a_long_source_is_corrected_without_rewriting_it(
    platform_admin,
) -> None:
    from billing.models import ModelPrice

    seeded = (
        ModelPrice.objects.filter(superseded_by__isnull=True)
        .exclude(provider="vllm")
        .order_by("-id")
    )
    price = next(p for p in seeded if len(p.source) > 300)  # the 515 characters
    client = _login(platform_admin)
    page = client.get(f"/platform/prices/?correct={price.pk}").content.decode()
    assert 'id="correct-form"' in page
    rates = {
        f"fix-{name}": str(getattr(price, name))
        for name in (
            "input_per_mtok",
            "cached_input_per_mtok",
            "output_per_mtok",
            "storage_per_mtok_hour",
        )
    }
    response = client.post(
        f"/platform/prices/{price.pk}/correct",
        {**rates, "fix-source": price.source, "fix-note": "re-checked the published page"},
    )
    errors = re.findall(r"class=\"error[^>]*>([^<]*)", response.content.decode())
    assert response.status_code == 302, errors
    assert ModelPrice.objects.filter(provider=price.provider, model=price.model).count() >= 2


def test_a_form_posted_after_the_session_expired_resumes_on_its_page_after_login(
    admin_a, tenant_a
) -> None:
    from billing.models import Budget

    client = Client()  # no session: it expired
    page = f"/t/{tenant_a.slug}/budgets/"
    response = client.post(
        f"{page}new",
        {"name": "q3", "period": "month", "limit_usd": "12", "thresholds": "50, 90"},
        HTTP_REFERER=f"http://testserver{page}",
    )
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={page}"
    assert not Budget.objects.all_tenants().exists()  # nothing submitted on anyone's behalf
    client.force_login(admin_a)  # keeps the session's data, as the login view does
    html = client.get(page).content.decode()
    assert 'id="resume-notice"' in html and 'id="console-resume"' in html and '"q3"' in html
    assert 'id="console-resume"' not in client.get(page).content.decode()  # once only


def test_an_expired_post_without_a_referrer_lands_on_the_console_not_a_405(tenant_a) -> None:
    response = Client().post(f"/t/{tenant_a.slug}/keys/new", {"name": "x"})
    assert response.status_code == 302 and response["Location"] == "/login/?next=/"


def test_a_domain_error_reads_in_plain_words_under_its_field_with_the_code_apart(
    admin_a, tenant_a
) -> None:
    response = _login(admin_a).post(
        f"/t/{tenant_a.slug}/keys/new", {"name": "old", "expires_at": "2001-01-01T00:00"}
    )
    assert response.status_code == 400
    html = response.content.decode()
    error = html.split('id="id_expires_at-error"')[1].split("</p>")[0]
    assert "Expires (UTC) must be in the future." in error
    assert "expires_at must" not in error and "(invalid_expiry)" not in error
    assert '<small class="error-code">Details: invalid_expiry</small>' in error


def test_a_ttl_below_the_providers_minimum_is_shown_under_the_ttl(admin_a, tenant_a) -> None:
    response = _login(admin_a).post(
        f"/t/{tenant_a.slug}/caches/new/",
        {
            "name": "kb",
            "provider": "vertex",
            "model": "gemini-2.5-flash",
            "system_instruction": "You answer from the FAQ. " * 40,
            "ttl_seconds": "5",
            "ttl_policy": "fixed",
            "create": "1",
        },
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_ttl_seconds-error"' in html and 'id="id_provider-error"' not in html


def test_the_model_is_a_select_of_the_catalog_and_a_model_of_another_provider_is_refused(
    admin_a, tenant_a
) -> None:
    client = _login(admin_a)
    html = client.get(f"/t/{tenant_a.slug}/caches/new/").content.decode()
    assert '<select name="model"' in html and '<option value="gemini-2.5-flash"' in html
    response = client.post(
        f"/t/{tenant_a.slug}/caches/new/",
        {
            "name": "kb",
            "provider": "vllm",
            "model": "gemini-2.5-flash",
            "system_instruction": "x" * 100,
            "ttl_seconds": "3600",
            "ttl_policy": "fixed",
            "preview": "1",
        },
    )
    assert response.status_code == 400
    assert "is not a vLLM workers model" in response.content.decode()


def test_the_cost_preview_names_the_budget_its_remaining_amount_and_the_estimate(
    admin_a, tenant_a
) -> None:
    from billing.services import budget_create
    from tests.factories import actor_for

    budget_create(
        actor=actor_for(admin_a),
        tenant=tenant_a,
        name="tiny",
        period="month",
        limit_micros=10,  # $0.00001: any storage estimate exceeds it
    )
    response = _login(admin_a).post(
        f"/t/{tenant_a.slug}/caches/new/",
        {
            "name": "kb",
            "provider": "vertex",
            "model": "gemini-2.5-flash",
            "system_instruction": "You answer from the FAQ. " * 60,
            "ttl_seconds": "3600",
            "ttl_policy": "fixed",
            "preview": "1",
        },
    )
    html = response.content.decode()
    item = html.split('id="preview-budgets"')[1].split("</li>")[0]
    assert "tiny" in item and "remaining of $0.0000" in item
    assert "storage estimate" in item and 'data-verdict="exceeds"' in item


def test_a_viewer_gets_the_reveal_of_nobody_elses_key(tenant_a, admin_a) -> None:
    """The parked secret belongs to the session that created it, in its tenant only."""
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    admin = _login(admin_a)
    location = admin.post(f"/t/{tenant_a.slug}/keys/new", {"name": "mine"})["Location"]
    assert 'id="new-key"' not in _login(viewer).get(location).content.decode()
    assert 'id="new-key"' in admin.get(location).content.decode()
