"""The request log (#27.2) and the charts' custom range (#27.5): a tenant's ledger rows,
filtered and keyset-paged, through the one access boundary; a bad range is a clear 400."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from billing.services import usage_flush, usage_record
from frontend.selectors.requests import PAGE_SIZE

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _book(tenant, n: int, **overrides) -> None:
    for i in range(n):
        fields = {
            "tenant": tenant,
            "request_id": f"{overrides.get('model', 'm')}-{i}",
            "provider": "vllm",
            "model": "ref-model",
            "occurred_at": T0 + timedelta(seconds=i),
            "prompt_tokens": 1000 + i,
            "cached_read_tokens": 768,
            "output_tokens": 7,
            "latency_ms": 120,
            "ttft_ms": 30,
            "worker": "w-1",
            "pool": "default",
        }
        fields.update(overrides)
        usage_record(**fields)
    usage_flush()


def test_the_request_log_lists_a_tenants_requests_with_counts_routing_and_status(
    admin_a, tenant_a, redis_flush
) -> None:
    from tenants.services import keys
    from tests.factories import ServiceAccountFactory, actor_for, bind

    sa = ServiceAccountFactory(tenant=tenant_a)
    bind(sa, "tenant.developer", tenant_a)
    key = keys.api_key_create(
        actor=actor_for(admin_a), tenant=tenant_a, name="app-key", principal=sa
    )
    _book(tenant_a, 2, api_key_id=str(key.key.pk))
    _book(tenant_a, 1, model="other-model", status="upstream_error", worker="w-2")
    html = _login(admin_a).get(f"/t/{tenant_a.slug}/requests/").content.decode()
    assert html.count('<tr data-request="') == 3
    row = html.split('data-request="m-1"')[1].split("</tr>")[0]
    assert "app-key" in row and "ref-model" in row and "worker w-1 (pool default)" in row
    assert ">1001<" in row and ">768<" in row and ">7<" in row and "120 ms" in row
    assert "prefix reused" in row and "OK" in row
    client = _login(admin_a)
    failed = client.get(f"/t/{tenant_a.slug}/requests/", {"status": "upstream_error"})
    assert failed.content.decode().count('<tr data-request="') == 1
    by_key = client.get(f"/t/{tenant_a.slug}/requests/", {"key": str(key.key.pk)})
    assert by_key.content.decode().count('<tr data-request="') == 2
    by_model = client.get(f"/t/{tenant_a.slug}/requests/", {"model": "other-model"})
    assert 'data-request="other-model-0"' in by_model.content.decode()
    in_range = client.get(
        f"/t/{tenant_a.slug}/requests/",
        {"since": "2026-11-03T12:00:01", "until": "2026-11-03T12:00:02"},
    ).content.decode()
    assert in_range.count('<tr data-request="') == 1 and 'data-request="m-1"' in in_range


def test_the_request_log_pages_by_keyset_and_never_shows_another_tenants_rows(
    admin_a, admin_b, tenant_a, tenant_b, redis_flush
) -> None:
    _book(tenant_a, PAGE_SIZE + 3)
    client = _login(admin_a)
    first = client.get(f"/t/{tenant_a.slug}/requests/").content.decode()
    assert first.count('<tr data-request="') == PAGE_SIZE
    nxt = first.split('" id="requests-older"')[0].rsplit('href="', 1)[1].replace("&amp;", "&")
    second = client.get(f"/t/{tenant_a.slug}/requests/{nxt}").content.decode()
    assert second.count('<tr data-request="') == 3 and 'id="requests-older"' not in second
    assert 'data-request="m-0"' in second  # the oldest, last
    theirs = _login(admin_b)
    assert theirs.get(f"/t/{tenant_a.slug}/requests/").status_code == 404
    own = theirs.get(f"/t/{tenant_b.slug}/requests/").content.decode()
    assert '<tr data-request="' not in own and "No requests" in own


def test_a_custom_chart_range_picks_its_buckets_and_a_bad_one_is_a_clear_400(
    admin_a, tenant_a
) -> None:
    client = _login(admin_a)
    url = f"/api/v1/tenants/{tenant_a.slug}/console/series"
    ok = client.get(url, {"since": "2026-11-03T12:00:00Z", "until": "2026-11-03T13:00:00Z"})
    assert ok.status_code == 200
    body = ok.json()
    assert body["range"] == "custom" and body["step_seconds"] == 60 and len(body["points"]) == 60
    week = client.get(url, {"since": "2026-11-01T00:00:00Z", "until": "2026-11-08T00:00:00Z"})
    assert week.json()["step_seconds"] == 3600
    for bad in (
        {"since": "2026-11-03T13:00:00Z", "until": "2026-11-03T12:00:00Z"},
        {"since": "yesterday", "until": "2026-11-03T12:00:00Z"},
        {"since": "2026-11-03T12:00:00Z"},
        {"since": "2020-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
    ):
        response = client.get(url, bad)
        assert response.status_code == 400, bad
        assert response.json()["error"]["code"] == "invalid_range", response.json()


def test_the_request_log_shows_what_the_cache_autopilot_did(admin_a, tenant_a, redis_flush):
    from billing.models import UsageRecord

    common = {"provider": "anthropic", "model": "claude-sonnet-4-5", "worker": "", "pool": ""}
    _book(tenant_a, 1, request_id="placed", autopilot="system:1h,end:5m", **common)
    _book(tenant_a, 1, request_id="keyed", autopilot="prompt_cache_key:cp-abc123", **common)
    _book(tenant_a, 1, request_id="client", autopilot="client", **common)
    _book(tenant_a, 1, request_id="fresh", autopilot="none:no_reuse", **common)
    _book(tenant_a, 1, request_id="off", **common)
    stored = dict(
        UsageRecord.objects.filter(tenant=tenant_a).values_list("request_id", "autopilot")
    )
    assert stored["placed"] == "system:1h,end:5m" and stored["off"] == ""
    html = _login(admin_a).get(f"/t/{tenant_a.slug}/requests/").content.decode()

    def row(request_id: str) -> str:
        return html.split(f'data-request="{request_id}"')[1].split("</tr>")[0]

    assert "autopilot: breakpoints system 1h, end 5m" in row("placed")
    assert "autopilot: prompt_cache_key cp-abc123" in row("keyed")
    assert "autopilot: client&#x27;s own breakpoints kept" in row("client")
    assert "autopilot: no breakpoints (no reuse)" in row("fresh")
    assert "autopilot" not in row("off")


def test_the_request_log_says_how_each_vllm_request_was_routed(admin_a, tenant_a, redis_flush):
    _book(tenant_a, 1, request_id="indexed", route="exact:fresh")
    _book(tenant_a, 1, request_id="guessed", route="approximate:stale_index")
    _book(tenant_a, 1, request_id="cached", route="cache")
    _book(tenant_a, 1, request_id="hosted", provider="anthropic", worker="", pool="")
    html = _login(admin_a).get(f"/t/{tenant_a.slug}/requests/").content.decode()

    def row(request_id: str) -> str:
        return html.split(f'data-request="{request_id}"')[1].split("</tr>")[0]

    assert "routed exact (fresh)" in row("indexed")
    assert "routed approximate (stale index)" in row("guessed")
    assert "routed by its cache" in row("cached")
    assert "routed" not in row("hosted")


def test_a_route_longer_than_its_column_is_refused_before_anything_is_queued(tenant_a):
    from billing.errors import InvalidUsage
    from billing.services.usage import usage_message

    with pytest.raises(InvalidUsage, match="route must be at most 64"):
        usage_message(
            tenant=tenant_a,
            request_id="r",
            provider="vllm",
            model="m",
            occurred_at=T0,
            prompt_tokens=1,
            route="x" * 65,
        )
