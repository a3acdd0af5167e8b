"""Query-count budgets for every list view, API and console (NetBox-style).

Each list is read with one row of every kind, then again after four more of each: the
number of SQL queries must not change (an N+1, a query per row, makes the second count
grow), and must stay within the baseline recorded here (lower it when a change saves
queries; raise it only with a reason in the commit). The walk over the URL resolver
fails when a list endpoint exists that this module does not measure.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, URLResolver, get_resolver

from tests.factories import HumanFactory, actor_for, bind

pytestmark = pytest.mark.django_db

T = "/api/v1/tenants/{t}/"
# Route → the most queries one read of it may make (with any number of rows).
API_BUDGETS: dict[str, int] = {
    T + "roles": 5,
    T + "service-accounts": 5,
    T + "keys": 5,
    T + "audit/events": 5,
    T + "audit/exports": 5,
    T + "caches": 5,
    T + "usage": 5,
    T + "budgets": 6,
    T + "budget-alerts": 5,
    T + "rate-limits": 5,
    T + "provider-credentials": 5,
    "/api/v1/platform/tenants": 4,
    "/api/v1/platform/principals": 4,
    "/api/v1/platform/group-mappings": 4,
    "/api/v1/platform/audit/exports": 4,
    "/api/v1/platform/prices": 4,
    "/api/v1/platform/pool-prices": 4,
    "/api/v1/platform/invitations": 4,
    "/api/v1/platform/scim-tokens": 4,
    # {p}: the reading platform admin, signed in once more from another client per _grow.
    "/api/v1/platform/principals/{p}/sessions": 5,
}
CONSOLE_BUDGETS: dict[str, int] = {
    "/t/{t}/": 19,
    "/t/{t}/access/": 11,
    "/t/{t}/keys/": 14,  # + spend, budgets, their periods, rate limits, role holders
    "/t/{t}/budgets/": 11,  # budgets, alerts and the rate limits
    "/t/{t}/audit/": 7,
    "/t/{t}/break-even/": 10,
    "/platform/": 15,
    "/platform/workers/": 7,
    "/platform/tenants/": 7,
    "/platform/prices/": 7,
}
GROWTH = 4


def _list_routes() -> set[str]:
    """Every DRF route whose GET is ``list``, as ``/api/...`` with ``{t}`` for the tenant."""
    found: set[str] = set()

    def walk(patterns, prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                actions = getattr(p.callback, "actions", None) or {}
                if actions.get("get") == "list":
                    route = (prefix + str(p.pattern)).replace("<slug:tenant>", "{t}")
                    found.add(route.replace("<uuid:pk>", "{p}"))

    walk(get_resolver().url_patterns, "/")
    return found


def test_every_list_endpoint_has_a_query_budget() -> None:
    assert _list_routes() == set(API_BUDGETS)


def _ok(response) -> dict:
    assert response.status_code in (200, 201), (response.status_code, response.content[:300])
    return response.json()


def _grow(api, *, tenant, admin, platform_admin, i: int) -> None:
    """One more row of every listed kind (through the API where it can create them)."""
    from billing.services import budget_reserve, budget_settle
    from billing.services.usage import usage_message, usage_write_direct
    from caches.models import CacheObject
    from tenants.models import Principal
    from workers.services import worker_register

    a = T.format(t=tenant.slug)
    api.force_login(admin)
    account = _ok(api.post(a + "service-accounts", {"name": f"bot-{i}"}, format="json"))
    bind(Principal.objects.get(pk=account["id"]), "tenant.viewer", tenant)
    key = _ok(api.post(a + "keys", {"name": f"k{i}", "principal": account["id"]}, format="json"))
    role = {"name": f"role{i}", "title": f"Role {i}", "permissions": ["caches.get"]}
    _ok(api.post(a + "roles", role, format="json"))
    limit = {"api_key": key["id"], "requests_per_minute": 5 + i}
    _ok(api.post(a + "rate-limits", limit, format="json"))
    provider = ("anthropic", "openai", "deepseek")[i % 3]  # rows 1, 2, 3, 3 (a rotation), 3
    _ok(
        api.put(
            a + f"provider-credentials/{provider}", {"api_key": f"sk-grow-{i:04d}"}, format="json"
        )
    )
    budget = {
        "name": f"b{i}",
        "period": "month",
        "limit_micros": 1_000_000,
        "thresholds": [50],
        "hard_limit": False,
    }
    _ok(api.post(a + "budgets", budget, format="json"))
    hold = budget_reserve(
        tenant=tenant, principal=admin, estimate_micros=600_000, request_id=f"grow-{i}"
    )
    budget_settle(reservation=hold, actual_micros=600_000)  # crosses the new budget's 50 %
    _ok(api.post(a + "audit/exports", {"format": "jsonl"}, format="json"))
    cache = CacheObject.objects.create(
        tenant=tenant,
        name=f"cache-{i}",
        provider="vllm",
        model="m",
        content={},
        content_digest=f"{i:064x}",
        ttl_seconds=600,
        state="active",
    )
    usage_write_direct(
        [
            usage_message(
                tenant=tenant,
                request_id=f"usage-{i}",
                provider="vertex",
                model="gemini-2.5-flash",
                occurred_at=datetime.now(UTC),
                prompt_tokens=1_000,
                cached_read_tokens=500,
                output_tokens=10,
                api_key_id=key["id"],
                principal_id=account["id"],
                cache_id=str(cache.pk),
            )
        ]
    )
    member = HumanFactory(username=f"member{i}")
    bind(member, "tenant.viewer", tenant)
    api.force_login(platform_admin)
    _ok(
        api.post(
            "/api/v1/platform/tenants",
            {"slug": f"grown-{i}", "display_name": f"Grown {i}"},
            format="json",
        )
    )
    _ok(api.post("/api/v1/platform/principals", {"username": f"person{i}"}, format="json"))
    _ok(
        api.post(
            "/api/v1/platform/group-mappings",
            {"tenant": tenant.slug, "group": f"group{i}", "role": "tenant.viewer"},
            format="json",
        )
    )
    price = {
        "provider": "openai",
        "model": f"gpt-grow-{i}",
        "input_per_mtok": "2.00",
        "cached_input_per_mtok": "0.50",
        "output_per_mtok": "8.00",
        "source": "rate card",
    }
    _ok(api.post("/api/v1/platform/prices", price, format="json"))
    pool = {
        "pool": f"pool-{i}",
        "gpu_hour_usd": "2.50",
        "prefill_tokens_per_gpu_second": "9000",
        "decode_tokens_per_gpu_second": "800",
        "kv_blocks_per_gpu": 12000,
        "source": "capacity plan",
    }
    _ok(api.post("/api/v1/platform/pool-prices", pool, format="json"))
    _ok(api.post("/api/v1/platform/audit/exports", {"format": "jsonl"}, format="json"))
    invite = {"username": f"invitee{i}", "email": f"invitee{i}@example.com"}
    _ok(api.post("/api/v1/platform/invitations", invite, format="json"))
    _ok(api.post("/api/v1/platform/scim-tokens", {"name": f"idp-{i}"}, format="json"))
    Client().force_login(platform_admin)  # one more session of the platform admin
    worker_register(
        actor=actor_for(platform_admin),
        name=f"worker-{i}",
        base_url=f"http://127.0.0.1:{18600 + i}",
        model="m",
    )


def _measure(api, url: str, principal) -> tuple[int, int | None]:
    """(queries, rows on the page) of one GET of ``url`` as ``principal`` (after a warm-up)."""
    api.force_login(principal)
    assert api.get(url).status_code == 200, url  # per-process caches (content types...)
    with CaptureQueriesContext(connection) as queries:
        response = api.get(url)
    assert response.status_code == 200, url
    rows = None
    if response.get("Content-Type", "").startswith("application/json"):
        data = response.json()
        rows = len(data["results"] if isinstance(data, dict) else data)  # sessions: a list
    return len(queries), rows


def test_list_views_make_the_same_number_of_queries_for_one_row_and_for_many(
    api, tenant_a, admin_a, platform_admin, settings
) -> None:
    settings.CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE = True
    views = {
        **{
            route.format(t=tenant_a.slug, p=platform_admin.pk): budget
            for route, budget in API_BUDGETS.items()
        },
        **{route.format(t=tenant_a.slug): budget for route, budget in CONSOLE_BUDGETS.items()},
    }

    def reader(url: str):
        return platform_admin if url.startswith(("/api/v1/platform/", "/platform/")) else admin_a

    _grow(api, tenant=tenant_a, admin=admin_a, platform_admin=platform_admin, i=0)
    few = {url: _measure(api, url, reader(url)) for url in views}
    for i in range(1, GROWTH + 1):
        _grow(api, tenant=tenant_a, admin=admin_a, platform_admin=platform_admin, i=i)
    many = {url: _measure(api, url, reader(url)) for url in views}
    report = "\n".join(
        f"{url}: {few[url][0]} queries ({few[url][1]} rows) -> {many[url][0]} "
        f"({many[url][1]} rows), budget {budget}"
        for url, budget in views.items()
    )
    grew = [url for url in views if many[url][0] != few[url][0]]
    over = [url for url, budget in views.items() if many[url][0] > budget]
    unseeded = [url for url in views if few[url][1] is not None and many[url][1] <= few[url][1]]
    assert not grew and not over and not unseeded, (
        f"grew with rows: {grew}\nover budget: {over}\nrows did not grow: {unseeded}\n{report}"
    )
