"""Requests naming caches (vLLM and Vertex), budgets, and the isolation check."""

from __future__ import annotations

import httpx
import openai
import pytest

from audit.models import AuditEvent
from caches.services import lifecycle
from caches.services.execution import operation_execute
from tests.caches.conftest import big_content
from tests.factories import actor_for
from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)
SUPPORT = {
    "system_instruction": "You are the support agent of Acme. Answer from the FAQ only. " * 5,
    "documents": [{"id": "faq", "text": "Refunds take five business days. " * 8}],
}


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def _make_cache(tenant_key: dict, **spec) -> str:
    outcome = lifecycle.cache_create(
        tenant=tenant_key["tenant"],
        actor=actor_for(tenant_key["admin"]),
        spec=lifecycle.CacheSpec(**spec),
    )
    operation_execute(operation_id=str(outcome.operation.pk))
    return str(outcome.operation.cache_id)


def test_vllm_cache_prefix_is_prepended_and_hits(live_server_url, ref_workers, tenant_keys):
    acme = tenant_keys["gw-acme"]
    cache_id = _make_cache(acme, name="support", provider="vllm", model=MODEL, content=SUPPORT)
    client = _client(live_server_url, acme["key"])
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "How long do refunds take?"}],
        max_tokens=3,
        extra_body={"cache": "support"},
    )
    usage = raw.parse().usage
    assert usage.prompt_tokens > 400  # the prefix really was prepended
    assert usage.prompt_tokens_details.cached_tokens >= 400
    by_header = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "And exchanges?"}],
        max_tokens=2,
        extra_headers={"X-Cacheplane-Cache": cache_id},
    )
    assert by_header.usage.prompt_tokens_details.cached_tokens >= 400
    from caches.models import CacheObject
    from caches.services.hits import cache_hits_flush

    assert cache_hits_flush() == 1
    cache = CacheObject.objects.all_tenants().get(pk=cache_id)
    assert cache.hit_count == 2 and cache.hit_tokens >= 800 and cache.query_rate_ewma > 0


def test_another_tenants_cache_is_404_and_audited(live_server_url, ref_workers, tenant_keys):
    acme, globex = tenant_keys["gw-acme"], tenant_keys["gw-globex"]
    cache_id = _make_cache(acme, name="support", provider="vllm", model=MODEL, content=SUPPORT)
    with pytest.raises(openai.NotFoundError) as raised:
        _client(live_server_url, globex["key"]).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"cache": cache_id},
        )
    assert raised.value.body["code"] == "cache_not_found"
    event = AuditEvent.objects.get(action="gateway.cache.not_found")
    assert event.tenant == globex["tenant"] and event.outcome == "denied"


def test_completions_cannot_use_a_vllm_cache(live_server_url, ref_workers, tenant_keys):
    acme = tenant_keys["gw-acme"]
    _make_cache(acme, name="support", provider="vllm", model=MODEL, content=SUPPORT)
    with pytest.raises(openai.BadRequestError) as raised:
        _client(live_server_url, acme["key"]).completions.create(
            model=MODEL, prompt="x", extra_body={"cache": "support"}
        )
    assert raised.value.body["code"] == "cache_requires_chat"


def test_vertex_cache_becomes_generate_content_with_cached_content(
    live_server_url, ref_workers, tenant_keys, vertex
):
    acme = tenant_keys["gw-acme"]
    _make_cache(
        acme, name="contracts", provider="vertex", model="gemini-2.5-flash", content=big_content()
    )
    client = _client(live_server_url, acme["key"])
    completion = client.chat.completions.create(
        model="gemini-2.5-flash",
        messages=[{"role": "user", "content": "Clause 3?"}],
        max_tokens=20,
        extra_body={"cache": "contracts"},
    )
    assert completion.usage.prompt_tokens_details.cached_tokens > 1024
    assert completion.usage.prompt_tokens > completion.usage.prompt_tokens_details.cached_tokens
    sent = vertex.requests(path_contains=":generateContent")[-1].body
    assert sent["cachedContent"].startswith("projects/p1/locations/us-central1/cachedContents/")
    stream = client.chat.completions.create(
        model="gemini-2.5-flash",
        messages=[{"role": "user", "content": "Clause 4?"}],
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"cache": "contracts"},
    )
    chunks = list(stream)
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 1024


def test_vertex_cache_with_a_system_message_is_a_clear_400(
    live_server_url, ref_workers, tenant_keys, vertex
):
    acme = tenant_keys["gw-acme"]
    _make_cache(
        acme, name="contracts", provider="vertex", model="gemini-2.5-flash", content=big_content()
    )
    before = len(vertex.requests(path_contains=":generateContent"))
    with pytest.raises(openai.BadRequestError) as raised:
        _client(live_server_url, acme["key"]).chat.completions.create(
            model="gemini-2.5-flash",
            extra_body={"cache": "contracts"},
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}],
        )
    assert raised.value.body["code"] == "cache_conflicts_with_system_or_tools"
    assert len(vertex.requests(path_contains=":generateContent")) == before


def test_over_budget_is_402_and_nothing_is_forwarded(
    live_server_url, ref_workers, tenant_keys, vertex
):
    from billing.models import ModelPrice
    from billing.services.budgets import budget_create
    from billing.services.prices import model_price_create

    acme = tenant_keys["gw-acme"]
    if not ModelPrice.objects.filter(provider="vertex", model="gemini-2.5-flash").exists():
        # Transactional tests flush the price book the migration seeded.
        model_price_create(
            actor=actor_for(None),
            provider="vertex",
            model="gemini-2.5-flash",
            source="test",
            rates={
                "input_per_mtok": "0.30",
                "cached_input_per_mtok": "0.03",
                "output_per_mtok": "2.50",
            },
        )
    budget_create(
        actor=actor_for(acme["admin"]),
        tenant=acme["tenant"],
        name="tight",
        period="month",
        limit_micros=1,
        hard_limit=True,
    )
    with pytest.raises(openai.APIStatusError) as raised:
        _client(live_server_url, acme["key"]).chat.completions.create(
            model="gemini-2.5-flash",
            messages=[{"role": "user", "content": "hello " * 50}],
            max_tokens=50,
        )
    assert raised.value.status_code == 402
    assert raised.value.body["code"] == "budget_exceeded"
    # The refusal says which budget and by how much (what the audit row records too).
    details = raised.value.body["details"]
    assert details["limit_micros"] == 1
    assert details["estimate_micros"] > details["limit_micros"] - details["spent_micros"]
    assert set(details) == {
        "budget",
        "limit_micros",
        "spent_micros",
        "reserved_micros",
        "estimate_micros",
    }
    assert vertex.requests(path_contains=":generateContent") == []


def test_isolation_check_command_proves_salting_on_a_live_deployment(
    live_server_url, ref_workers, tenant_keys
):
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command(
        "isolation_check",
        "--url",
        live_server_url,
        "--model",
        MODEL,
        "--key-a",
        tenant_keys["gw-acme"]["key"],
        "--key-b",
        tenant_keys["gw-globex"]["key"],
        stdout=out,
    )
    text = out.getvalue()
    assert "PASS" in text and "cross-tenant cached_tokens=0" in text


def test_raw_http_error_bodies_follow_openai_shape(live_server_url, ref_workers, tenant_keys):
    response = httpx.get(f"{live_server_url}/v1/models")
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
