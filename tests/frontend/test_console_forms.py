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


def test_rate_limits_are_created_edited_and_removed_through_the_gateway_service(
    admin_a, tenant_a
) -> None:
    from gateway.models import RateLimit
    from tenants.services import keys
    from tests.factories import actor_for

    issued = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="checkout")
    client = _login(admin_a)
    base = f"/t/{tenant_a.slug}"
    response = client.post(
        f"{base}/rate-limits/new",
        {"rl-api_key": "", "rl-requests_per_minute": "600", "rl-weight": "2"},
    )
    assert response.status_code == 302
    tenant_limit = RateLimit.objects.get(tenant=tenant_a, api_key__isnull=True)
    assert (tenant_limit.requests_per_minute, tenant_limit.weight) == (600, 2)
    assert tenant_limit.tokens_per_minute is None  # empty: unlimited
    response = client.post(
        f"{base}/rate-limits/new",
        {"rl-api_key": str(issued.key.pk), "rl-tokens_per_minute": "20000"},
    )
    assert response.status_code == 302
    key_limit = RateLimit.objects.get(tenant=tenant_a, api_key=issued.key)
    assert key_limit.tokens_per_minute == 20000 and key_limit.weight == 1
    page = client.get(f"{base}/budgets/").content.decode()
    assert f'data-rate-limit="{key_limit.pk}"' in page and "key checkout" in page

    prefix = f"rl{tenant_limit.pk.hex[:8]}"
    response = client.post(
        f"{base}/rate-limits/{tenant_limit.pk}/edit",
        {f"{prefix}-requests_per_minute": "", f"{prefix}-concurrent_requests": "5"},
    )
    assert response.status_code == 302
    tenant_limit.refresh_from_db()
    assert tenant_limit.requests_per_minute is None and tenant_limit.concurrent_requests == 5
    assert tenant_limit.weight == 1  # an emptied weight is the default share

    response = client.post(f"{base}/rate-limits/{key_limit.pk}/delete")
    assert response.status_code == 302
    assert not RateLimit.objects.filter(tenant=tenant_a, pk=key_limit.pk).exists()
    audited = AuditEvent.objects.filter(
        tenant=tenant_a, auth_method="session", outcome="success", target_type="rate_limit"
    ).values_list("action", flat=True)
    assert sorted(audited) == [
        "gateway.rate_limit.create",
        "gateway.rate_limit.create",
        "gateway.rate_limit.delete",
        "gateway.rate_limit.update",
    ]


def test_bad_rate_limits_are_shown_next_to_their_field_and_nothing_is_written(
    admin_a, tenant_a
) -> None:
    from gateway.models import RateLimit
    from gateway.services import rate_limit_create
    from tests.factories import actor_for

    client = _login(admin_a)
    url = f"/t/{tenant_a.slug}/rate-limits/new"
    response = client.post(url, {"rl-requests_per_minute": "0"})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_rl-requests_per_minute-error"' in html
    assert not RateLimit.objects.filter(tenant=tenant_a).exists()

    rate_limit_create(
        tenant=tenant_a, actor=actor_for(admin_a), api_key_id=None, values={"weight": 3}
    )
    response = client.post(url, {"rl-api_key": "", "rl-requests_per_minute": "10"})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_rl-api_key-error"' in html and "rate_limit_exists" in html
    assert RateLimit.objects.filter(tenant=tenant_a).count() == 1


def test_rate_limit_forms_are_refused_to_a_viewer_and_the_refusal_is_audited(tenant_a) -> None:
    from gateway.models import RateLimit

    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    client = _login(viewer)
    page = client.get(f"/t/{tenant_a.slug}/budgets/").content.decode()
    assert 'id="rate-limits-table"' in page and 'id="rate-limit-form"' not in page
    response = client.post(f"/t/{tenant_a.slug}/rate-limits/new", {"rl-requests_per_minute": "10"})
    assert response.status_code == 403
    assert not RateLimit.objects.filter(tenant=tenant_a).exists()
    assert AuditEvent.objects.filter(
        tenant=tenant_a, outcome="denied", actor_id=str(viewer.pk)
    ).exists()


def test_a_platform_admin_prices_a_worker_pool_and_corrects_it_from_the_console(
    platform_admin,
) -> None:
    from billing.models import PoolPrice

    client = _login(platform_admin)
    form = {
        "pool-pool": "a100-east",
        "pool-gpu_hour_usd": "4.00",
        "pool-prefill_tokens_per_gpu_second": "2000",
        "pool-decode_tokens_per_gpu_second": "50",
        "pool-kv_blocks_per_gpu": "4096",
        "pool-kv_block_tokens": "16",
        "pool-source": "our GPU contract",
    }
    assert client.post("/platform/prices/pools/new", form).status_code == 302
    price = PoolPrice.objects.get(pool="a100-east")
    assert price.gpu_hour_usd == 4
    bad = client.post("/platform/prices/pools/new", {**form, "pool-kv_blocks_per_gpu": "0"})
    assert bad.status_code == 400 and 'id="id_pool-kv_blocks_per_gpu-error"' in bad.content.decode()
    page = client.get(f"/platform/prices/?correct_pool={price.pk}").content.decode()
    assert 'id="pool-correct-form"' in page
    fixed = {k.replace("pool-", "poolfix-", 1): v for k, v in form.items() if k != "pool-pool"}
    response = client.post(
        f"/platform/prices/pools/{price.pk}/correct",
        {**fixed, "poolfix-gpu_hour_usd": "3.50", "poolfix-note": "contract rate"},
    )
    assert response.status_code == 302
    assert PoolPrice.objects.filter(pool="a100-east").count() == 2
    assert {"billing.pool_price.create", "billing.pool_price.correct"} <= set(
        AuditEvent.objects.values_list("action", flat=True)
    )
    assert (
        "vllm"
        not in client.get("/platform/prices/")
        .content.decode()
        .split('id="price-form"')[1]
        .split("</form>")[0]
    )  # vLLM is priced by pool, never per model
