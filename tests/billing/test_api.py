"""Billing API: status codes, scoping, error codes, nothing written on bad input, query budgets."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import Budget, ModelPrice, StorageAccrual
from billing.services import (
    budget_reserve,
    budget_settle,
    storage_accrue,
    usage_flush,
    usage_record,
)
from tests.billing.conftest import T0
from tests.billing.ledger_support import book_micros
from tests.factories import HumanFactory, bind

pytestmark = pytest.mark.django_db

A = "/api/v1/tenants/tenant-a"


def _error(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


NOW = T0 + timedelta(minutes=40)  # storage below stays inside the 10:00 hour
WINDOW = {
    "since": (T0 - timedelta(hours=2)).isoformat(),
    "until": (T0 + timedelta(hours=2)).isoformat(),
}


@pytest.fixture
def usage(tenant_a, tenant_b, price_book, usage_queue):
    now = NOW
    for i in range(5):
        usage_record(
            tenant=tenant_a,
            request_id=f"a-{i}",
            provider="vertex",
            model="gemini-2.5-pro",
            occurred_at=now - timedelta(minutes=i),
            prompt_tokens=100_000,
            cached_read_tokens=90_000,
            output_tokens=1_000,
            cache_id="cache-1" if i % 2 else None,
        )
    usage_record(
        tenant=tenant_b,
        request_id="b-0",
        provider="vertex",
        model="gemini-2.5-pro",
        occurred_at=now,
        prompt_tokens=10,
        output_tokens=1,
    )
    usage_flush()
    storage_accrue(
        tenant=tenant_a,
        cache_id="cache-1",
        provider="vertex",
        model="gemini-2.5-pro",
        tokens=100_000,
        start=now - timedelta(minutes=20),
        end=now - timedelta(minutes=10),
    )
    return now


def test_usage_list_is_scoped_paginated_and_within_a_query_budget(
    api, admin_a, usage, django_assert_max_num_queries
) -> None:
    api.force_login(admin_a)
    with django_assert_max_num_queries(8):
        response = api.get(f"{A}/usage", {"page_size": 3, **WINDOW})
    assert response.status_code == 200
    body = response.json()
    assert len(body["results"]) == 3 and body["next"]
    assert {r["request_id"] for r in body["results"]} <= {f"a-{i}" for i in range(5)}
    assert body["results"][0]["cost_micros"] == 33_750
    second = api.get(body["next"])
    assert {r["request_id"] for r in second.json()["results"]} <= {f"a-{i}" for i in range(5)}
    filtered = api.get(f"{A}/usage", {"cache_id": "cache-1", **WINDOW}).json()["results"]
    assert {r["request_id"] for r in filtered} == {"a-1", "a-3"}


@pytest.mark.parametrize("group_by", ["day", "model", "provider", "cache"])
def test_spend_groups_requests_and_storage(api, admin_a, usage, group_by) -> None:
    api.force_login(admin_a)
    response = api.get(f"{A}/usage/spend", {"group_by": group_by, **WINDOW})
    assert response.status_code == 200, response.json()
    rows = response.json()["rows"]
    storage = StorageAccrual.objects.all_tenants().get().cost_micros
    assert storage == 75_000  # 10 minutes × $0.45/h
    if group_by == "cache":
        by_key = {r["key"]: r for r in rows}
        assert by_key["cache-1"]["requests"] == 2
        assert by_key["cache-1"]["storage_cost_micros"] == storage
        assert by_key["cache-1"]["saved_micros"] == 2 * (135_000 - 33_750) - storage
    else:
        assert sum(r["request_cost_micros"] for r in rows) == 5 * 33_750
        assert sum(r["storage_cost_micros"] for r in rows) == storage
        assert sum(r["spent_micros"] for r in rows) == 5 * 33_750 + storage


def test_savings_report_saved_against_spent(api, admin_a, usage) -> None:
    api.force_login(admin_a)
    body = api.get(f"{A}/usage/savings", WINDOW).json()
    assert body["request_cost_micros"] == 5 * 33_750
    assert body["cost_without_cache_micros"] == 5 * 135_000
    assert body["storage_cost_micros"] == 75_000
    assert body["saved_micros"] == 5 * (135_000 - 33_750) - 75_000
    assert body["hit_ratio"] == "0.9000"


def test_the_csv_export_streams_every_row_of_the_period(api, admin_a, usage) -> None:
    api.force_login(admin_a)
    response = api.get(f"{A}/usage/export.csv", WINDOW)
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:3] == ["kind", "occurred_at", "request_id"]
    kinds = [r[0] for r in rows[1:]]
    assert kinds.count("request") == 5 and kinds.count("storage") == 1
    assert {r[-1] for r in rows[1:] if r[0] == "request"} == {"0.033750"}


def test_a_bad_range_is_400(api, admin_a) -> None:
    api.force_login(admin_a)
    now = timezone.now()
    response = api.get(
        f"{A}/usage/savings", {"since": now.isoformat(), "until": (now - timedelta(1)).isoformat()}
    )
    assert response.status_code == 400 and _error(response)["code"] == "invalid_range"
    assert api.get(f"{A}/usage/spend", {"group_by": "week"}).status_code == 400


def test_reading_usage_needs_usage_get(api, tenant_a) -> None:
    developer = HumanFactory()
    bind(developer, "tenant.developer", tenant_a)
    api.force_login(developer)
    assert api.get(f"{A}/usage").status_code == 403
    assert api.get(f"{A}/budgets").status_code == 403


def test_budget_crud_shows_the_secret_once(api, admin_a, tenant_a) -> None:
    api.force_login(admin_a)
    payload = {"name": "team", "period": "month", "limit_micros": 5_000_000, "thresholds": [80, 50]}
    created = api.post(f"{A}/budgets", payload, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["webhook_secret"].startswith("whsec_") and body["thresholds"] == [50, 80]
    assert created["Cache-Control"] == "no-store"
    assert body["current_period"]["limit_micros"] == 5_000_000
    url = f"{A}/budgets/{body['id']}"
    fetched = api.get(url).json()
    assert "webhook_secret" not in fetched and fetched["current_period"]["spent_micros"] == 0
    patched = api.patch(url, {"limit_micros": 7_000_000}, format="json")
    assert (
        patched.status_code == 200 and patched.json()["current_period"]["limit_micros"] == 7_000_000
    )
    rotated = api.post(f"{url}/rotate-secret", {}, format="json").json()["webhook_secret"]
    assert rotated != body["webhook_secret"]
    assert api.delete(url).status_code == 204
    assert api.get(f"{A}/budgets").json()["results"] == []
    assert api.get(url).json()["archived_at"] is not None


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"period": "fortnight"}, "invalid_period"),
        ({"thresholds": [0, 50]}, "invalid_threshold"),
        ({"thresholds": [50, 120]}, "invalid_threshold"),
        ({"limit_micros": -1}, "invalid_budget"),
        ({"limit_micros": "lots"}, "invalid_input"),
        ({"principal": "00000000-0000-0000-0000-000000000000"}, "unknown_principal"),
    ],
)
def test_bad_budgets_get_400_with_a_stable_code_and_write_nothing(
    api, admin_a, payload, code
) -> None:
    api.force_login(admin_a)
    body = {"name": "b", "period": "month", "limit_micros": 1_000_000, **payload}
    response = api.post(f"{A}/budgets", body, format="json")
    assert response.status_code == 400 and _error(response)["code"] == code
    assert not Budget.objects.all_tenants().exists()


def test_a_viewer_reads_budgets_but_cannot_write_them(api, tenant_a) -> None:
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    api.force_login(viewer)
    assert api.get(f"{A}/budgets").status_code == 200
    response = api.post(
        f"{A}/budgets", {"name": "x", "period": "day", "limit_micros": 1}, format="json"
    )
    assert response.status_code == 403 and not Budget.objects.all_tenants().exists()


def test_b_cannot_reach_a_budget_through_its_own_tenant(api, admin_a, admin_b, tenant_b) -> None:
    api.force_login(admin_a)
    budget_id = api.post(
        f"{A}/budgets", {"name": "a", "period": "day", "limit_micros": 1_000_000}, format="json"
    ).json()["id"]
    api.force_login(admin_b)
    for verb in ("get", "patch", "delete"):
        response = getattr(api, verb)(
            f"/api/v1/tenants/{tenant_b.slug}/budgets/{budget_id}", {}, format="json"
        )
        assert response.status_code == 404
    assert Budget.objects.all_tenants().get(pk=budget_id).archived_at is None


def test_budget_and_alert_lists_stay_within_a_query_budget(
    api, tenant_a, admin_a, actor, django_assert_max_num_queries
) -> None:
    from billing.services import budget_create

    for i in range(6):
        budget_create(
            actor=actor,
            tenant=tenant_a,
            name=f"b{i}",
            period="day",
            limit_micros=1_000_000,
            thresholds=[10, 20],
        )
    hold = budget_reserve(tenant=tenant_a, principal=admin_a, estimate_micros=0, request_id="r")
    budget_settle(reservation=hold, actual_micros=500_000)
    book_micros(tenant_a, 500_000)  # the spend, booked by the ledger: crosses thresholds
    api.force_login(admin_a)
    with django_assert_max_num_queries(8):
        budgets = api.get(f"{A}/budgets")
    assert len(budgets.json()["results"]) == 6
    with django_assert_max_num_queries(7):
        alerts = api.get(f"{A}/budget-alerts")
    assert len(alerts.json()["results"]) == 12
    assert api.get(f"{A}/budget-alerts", {"budget": "nope"}).status_code == 400


def test_break_even_over_the_api(api, admin_a, price_book) -> None:
    api.force_login(admin_a)
    response = api.post(
        f"{A}/break-even",
        {
            "provider": "vertex",
            "model": "gemini-2.5-pro",
            "context_tokens": 100_000,
            "queries_per_hour": "10",
            "ttl_seconds": 3600,
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["breakeven_queries_per_hour"] == "4.0000"
    assert body["hourly_cost_with_cache_micros"] == 700_000 and body["blended"] is None
    domain = api.post(
        f"{A}/break-even",
        {
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "context_tokens": 1000,
            "queries_per_hour": "1",
            "ttl_seconds": 300,
            "input_tokens_per_day": 100_000_000,
            "hit_ratio": "0.8",
        },
        format="json",
    ).json()
    assert domain["blended"]["period_cost_micros"] == 2_520_000_000
    unknown = api.post(
        f"{A}/break-even",
        {
            "provider": "vertex",
            "model": "nope",
            "context_tokens": 1,
            "queries_per_hour": "1",
            "ttl_seconds": 60,
        },
        format="json",
    )
    assert unknown.status_code == 404 and _error(unknown)["code"] == "price_not_found"


# --- Platform price book -------------------------------------------------------------

PRICE = {
    "provider": "openai",
    "model": "gpt-api",
    "input_per_mtok": "2.00",
    "cached_input_per_mtok": "0.50",
    "output_per_mtok": "8.00",
    "source": "rate card",
}


def test_tenant_members_cannot_touch_the_price_book(api, admin_a, price_book) -> None:
    api.force_login(admin_a)
    assert api.get("/api/v1/platform/prices").status_code == 403
    assert api.post("/api/v1/platform/prices", PRICE, format="json").status_code == 403
    assert not ModelPrice.objects.filter(model="gpt-api").exists()


def test_platform_admins_add_and_correct_prices(
    api, platform_admin, price_book, django_assert_max_num_queries
) -> None:
    api.force_login(platform_admin)
    created = api.post("/api/v1/platform/prices", PRICE, format="json")
    assert created.status_code == 201, created.json()
    price = created.json()
    assert (price["version"], price["cache_write_5m_per_mtok"]) == (1, "2.000000")
    fix = {**PRICE, "input_per_mtok": "1.75", "source": "fix"}
    corrected = api.post(f"/api/v1/platform/prices/{price['id']}/correct", fix, format="json")
    assert corrected.status_code == 201 and corrected.json()["version"] == 2
    old = api.get(f"/api/v1/platform/prices/{price['id']}").json()
    assert old["superseded_by"] == corrected.json()["id"]
    with django_assert_max_num_queries(6):
        listed = api.get("/api/v1/platform/prices", {"provider": "openai", "model": "gpt-api"})
    assert [p["version"] for p in listed.json()["results"]] == [2, 1]


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"input_per_mtok": "-1.00"}, 400, "invalid_price"),
        ({"output_per_mtok": "ten"}, 400, "invalid_input"),
        ({"cached_input_per_mtok": None}, 400, "invalid_input"),
        ({"provider": "azure"}, 400, "invalid_input"),
        (
            {
                "model": "gemini-2.5-pro",
                "provider": "vertex",
                "effective_from": "2026-02-01T00:00:00Z",
            },
            409,
            "price_overlap",
        ),
    ],
)
def test_bad_prices_get_a_stable_code_and_write_nothing(
    api, platform_admin, price_book, change, status, code
) -> None:
    api.force_login(platform_admin)
    count = ModelPrice.objects.count()
    response = api.post("/api/v1/platform/prices", {**PRICE, **change}, format="json")
    assert response.status_code == status and _error(response)["code"] == code
    assert ModelPrice.objects.count() == count


def test_pool_prices_over_the_api(api, platform_admin) -> None:
    api.force_login(platform_admin)
    body = {
        "pool": "h100-api",
        "gpu_hour_usd": "2.50",
        "prefill_tokens_per_gpu_second": "9000",
        "decode_tokens_per_gpu_second": "800",
        "kv_blocks_per_gpu": 12000,
        "source": "capacity plan 2026",
    }
    created = api.post("/api/v1/platform/pool-prices", body, format="json")
    assert created.status_code == 201, created.json()
    bad = api.post(
        "/api/v1/platform/pool-prices", {**body, "pool": "x", "gpu_hour_usd": "-2"}, format="json"
    )
    assert bad.status_code == 400 and _error(bad)["code"] == "invalid_price"
    assert api.get("/api/v1/platform/pool-prices").json()["results"][0]["pool"] == "h100-api"


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_export_streams_from_an_async_iterator() -> None:
    """uvicorn serves the API through ASGI: Django would buffer a sync iterator whole."""
    from asgiref.sync import sync_to_async
    from django.test import AsyncClient

    from billing.models import UsageRecord
    from tests.factories import TenantFactory

    def setup():
        tenant = TenantFactory(slug="tenant-s")
        admin = HumanFactory()
        bind(admin, "tenant.admin", tenant)
        UsageRecord.objects.bulk_create(
            UsageRecord(
                tenant=tenant,
                request_id=f"r{i}",
                occurred_at=NOW,
                provider="openai",
                model="gpt-5",
                prompt_tokens=10,
                cost_micros=i,
            )
            for i in range(2_500)
        )
        return admin

    admin = await sync_to_async(setup)()
    client = AsyncClient()
    await client.aforce_login(admin)
    response = await client.get("/api/v1/tenants/tenant-s/usage/export.csv", WINDOW)
    assert response.status_code == 200 and response.is_async
    body = b"".join([part async for part in response.streaming_content]).decode()
    rows = list(csv.reader(io.StringIO(body)))
    assert len(rows) == 1 + 2_500 and rows[-1][0] == "request"
