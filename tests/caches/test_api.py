"""Cache self-service API: contract, permissions, idempotency, bad input."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from caches.models import CacheObject, CacheState
from caches.services.execution import operation_execute
from tests.caches.conftest import big_content
from tests.factories import HumanFactory, bind

pytestmark = pytest.mark.django_db


def _body(**overrides) -> dict:
    body = {
        "name": "contracts",
        "provider": "vertex",
        "model": "gemini-2.5-flash",
        "content": big_content(),
        "ttl_seconds": 3600,
    }
    body.update(overrides)
    return body


def _url(tenant, suffix: str = "") -> str:
    return f"/api/v1/tenants/{tenant.slug}/caches{suffix}"


def test_create_is_202_with_an_operation_then_the_cache_is_readable(
    api, vertex, tenant_a, admin_a
) -> None:
    api.force_login(admin_a)
    response = api.post(_url(tenant_a), _body(), format="json")
    assert response.status_code == 202, response.json()
    op = response.json()
    assert op["kind"] == "create" and op["status"] == "pending"
    assert response["Location"].endswith(op["cache"])
    operation_execute(operation_id=op["id"])
    detail = api.get(_url(tenant_a, f"/{op['cache']}")).json()
    assert detail["state"] == "active" and detail["token_count"] > 1024
    assert detail["content"]["tools"][0]["name"] == "cite"
    polled = api.get(_url(tenant_a, f"/operations/{op['id']}")).json()
    assert polled["status"] == "succeeded"
    timeline = api.get(_url(tenant_a, f"/{op['cache']}/timeline")).json()
    assert [t["to_state"] for t in timeline] == ["creating", "active"]


def test_idempotency_key_replay_returns_the_original_operation(api, vertex, tenant_a, admin_a):
    api.force_login(admin_a)
    first = api.post(_url(tenant_a), _body(), format="json", HTTP_IDEMPOTENCY_KEY="abc-1")
    replay = api.post(_url(tenant_a), _body(), format="json", HTTP_IDEMPOTENCY_KEY="abc-1")
    assert first.status_code == 202 and replay.status_code == 200
    assert replay.json()["id"] == first.json()["id"]
    clash = api.post(
        _url(tenant_a), _body(content=big_content("x")), format="json", HTTP_IDEMPOTENCY_KEY="abc-1"
    )
    assert clash.status_code == 409
    assert clash.json()["error"]["code"] == "idempotency_key_reused"
    assert CacheObject.objects.all_tenants().count() == 1


@pytest.mark.parametrize(
    ("overrides", "status", "code"),
    [
        ({"ttl_seconds": -5}, 400, "invalid_ttl"),
        ({"model": "gpt-imaginary"}, 400, "unknown_model"),
        ({"content": {"system_instruction": "short"}}, 400, "below_minimum_tokens"),
        ({"prewarm_cron": "every day"}, 400, "invalid_cron"),
        ({"provider": "openai"}, 400, "invalid_input"),
        ({"content": {"documents": [{"id": "x", "uri": "gs://b/x"}]}}, 400, "gcs_uri_not_allowed"),
        ({"content": {"documents": [{"id": "x"}]}}, 400, "invalid_input"),
        ({"name": ""}, 400, "invalid_input"),
    ],
)
def test_bad_create_input_is_4xx_with_a_code_and_nothing_written(
    api, vertex, tenant_a, admin_a, overrides, status, code
) -> None:
    api.force_login(admin_a)
    response = api.post(_url(tenant_a), _body(**overrides), format="json")
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    assert not CacheObject.objects.all_tenants().exists()
    assert vertex.requests() == []


def test_below_minimum_error_names_the_minimum(api, vertex, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    response = api.post(
        _url(tenant_a), _body(content={"system_instruction": "short"}), format="json"
    )
    error = response.json()["error"]
    assert error["details"]["minimum"] == 1024 and "1024" in error["message"]


def test_viewer_can_read_but_not_evict(api, vertex, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    op = api.post(_url(tenant_a), _body(), format="json").json()
    operation_execute(operation_id=op["id"])
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    api.force_login(viewer)
    assert api.get(_url(tenant_a, f"/{op['cache']}")).status_code == 200
    denied = api.post(_url(tenant_a, f"/{op['cache']}/evict"), {}, format="json")
    assert denied.status_code == 403
    assert CacheObject.objects.all_tenants().get(pk=op["cache"]).state == CacheState.ACTIVE


def test_extend_policy_and_evict_over_the_api(api, vertex, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    op = api.post(_url(tenant_a), _body(), format="json").json()
    operation_execute(operation_id=op["id"])
    extend = api.post(_url(tenant_a, f"/{op['cache']}/extend"), {"ttl_seconds": 0}, format="json")
    assert extend.status_code == 400 and extend.json()["error"]["code"] == "invalid_ttl"
    extend = api.post(
        _url(tenant_a, f"/{op['cache']}/extend"), {"ttl_seconds": 7200}, format="json"
    )
    assert extend.status_code == 202
    operation_execute(operation_id=extend.json()["id"])
    policy = api.post(
        _url(tenant_a, f"/{op['cache']}/policy"),
        {"ttl_policy": "sliding", "prewarm_cron": "30 6 * * *"},
        format="json",
    )
    assert policy.status_code == 200 and policy.json()["ttl_policy"] == "sliding"
    evict = api.post(_url(tenant_a, f"/{op['cache']}/evict"), {}, format="json")
    assert evict.status_code == 202
    operation_execute(operation_id=evict.json()["id"])
    again = api.post(_url(tenant_a, f"/{op['cache']}/evict"), {}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_state"


def test_lint_endpoint_reports_volatile_content(api, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    response = api.post(
        _url(tenant_a, "/lint"),
        {"content": {"system_instruction": "Today is 2026-11-30. You are helpful."}},
        format="json",
    )
    assert response.status_code == 200
    assert {f["kind"] for f in response.json()["findings"]} >= {"date"}
    assert len(response.json()["content_digest"]) == 64


def test_list_filters_and_has_a_query_budget(api, vertex, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    for n in range(12):
        api.post(_url(tenant_a), _body(name=f"c{n}", content=big_content(f"s{n}")), format="json")
    with CaptureQueriesContext(connection) as queries:
        response = api.get(_url(tenant_a, "?state=pending&provider=vertex"))
    assert response.status_code == 200 and len(response.json()["results"]) == 12
    assert len(queries) <= 8
    assert api.get(_url(tenant_a, "?state=weird")).status_code == 400
    assert api.get(_url(tenant_a, "?state=active")).json()["results"] == []
