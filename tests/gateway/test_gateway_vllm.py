"""The gateway with the real OpenAI SDK as client and reference workers upstream."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from audit.models import AuditEvent
from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)
LONG_PROMPT = "Summarise the Globex refund policy for a customer. " * 12


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def _chat(client: openai.OpenAI, content: str = LONG_PROMPT, **kwargs):
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=4, **kwargs
    )


def test_chat_completion_through_the_openai_sdk(live_server_url, ref_workers, tenant_keys):
    raw = _chat(_client(live_server_url, tenant_keys["gw-acme"]["key"]))
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.usage.prompt_tokens > 100 and completion.usage.completion_tokens >= 1
    assert float(raw.headers["x-cacheplane-overhead-ms"]) >= 0
    assert raw.headers["x-cacheplane-worker"] in {"gw0", "gw1"}


def test_repeated_prompt_hits_within_a_tenant_and_never_across(
    live_server_url, ref_workers, tenant_keys
):
    acme = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    globex = _client(live_server_url, tenant_keys["gw-globex"]["key"])
    first = _chat(acme)
    second = _chat(acme)
    other = _chat(globex)
    # Prefix affinity: the second request goes where the first one left its blocks.
    assert second.headers["x-cacheplane-worker"] == first.headers["x-cacheplane-worker"]
    assert second.parse().usage.prompt_tokens_details.cached_tokens > 0
    details = other.parse().usage.prompt_tokens_details
    assert details is None or not details.cached_tokens


def test_streaming_relays_chunks_and_usage_only_when_asked(
    live_server_url, ref_workers, tenant_keys
):
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": LONG_PROMPT}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert any(c.choices and c.choices[0].delta.content is not None for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    quiet = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=3, stream=True
        )
    )
    assert all(c.usage is None for c in quiet)


def test_completions_endpoint(live_server_url, ref_workers, tenant_keys):
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    result = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=3)
    assert result.object == "text_completion" and result.usage.completion_tokens == 3


def test_models_lists_worker_and_vertex_models(live_server_url, ref_workers, tenant_keys):
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    ids = {m.id for m in client.models.list()}
    assert MODEL in ids and "gemini-2.5-flash" in ids


def test_models_retrieve_finds_a_served_model_and_404s_an_unknown_one(
    live_server_url, ref_workers, tenant_keys
):
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    card = client.models.retrieve(MODEL)  # an id with a slash
    assert (card.id, card.owned_by) == (MODEL, "vllm")
    assert client.models.retrieve("gemini-2.5-flash").owned_by == "vertex"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        _client(live_server_url, "cpk_wrong").models.retrieve(MODEL)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("response_format", {"type": "json_object"}),
        ("logit_bias", {"50": 5}),
        ("presence_penalty", 0.5),
        ("frequency_penalty", 0.5),
        ("min_p", 0.1),
    ],
)
def test_sampling_the_reference_worker_cannot_do_is_refused_not_ignored(
    live_server_url, ref_workers, tenant_keys, name, value
):
    response = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2,
            name: value,
        },
        headers={"Authorization": f"Bearer {tenant_keys['gw-acme']['key']}"},
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_parameter", name)


def test_best_of_on_completions_is_refused_for_the_reference_worker(
    live_server_url, ref_workers, tenant_keys
):
    response = httpx.post(
        f"{live_server_url}/v1/completions",
        json={"model": MODEL, "prompt": "x", "max_tokens": 2, "best_of": 3},
        headers={"Authorization": f"Bearer {tenant_keys['gw-acme']['key']}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_parameter"


def test_client_supplied_cache_salt_is_refused(live_server_url, ref_workers, tenant_keys):
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"cache_salt": "victim-salt"},
        )
    assert raised.value.body["code"] == "cache_salt_not_allowed"


@pytest.mark.parametrize(
    ("auth", "status", "code"),
    [
        (None, 401, "missing_api_key"),
        ("Bearer cpk_bad", 401, "invalid_api_key"),
        ("Basic abc", 401, "invalid_api_key"),
    ],
)
def test_missing_or_malformed_keys_are_401(live_server_url, ref_workers, auth, status, code):
    headers = {"Authorization": auth} if auth else {}
    response = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        headers=headers,
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_revoked_key_and_suspended_tenant_are_refused_and_audited(
    live_server_url, ref_workers, tenant_keys
):
    from tenants.models import TenantState
    from tenants.services import keys
    from tenants.services.tenants import tenant_set_state
    from tests.factories import actor_for

    acme, globex = tenant_keys["gw-acme"], tenant_keys["gw-globex"]
    keys.api_key_revoke(
        actor=actor_for(acme["admin"]), tenant=acme["tenant"], key_id=str(acme["key_row"].pk)
    )
    keys.key_cache.clear()
    with pytest.raises(openai.AuthenticationError) as raised:
        _chat(_client(live_server_url, acme["key"]))
    assert raised.value.body["code"] == "api_key_revoked"
    assert AuditEvent.objects.filter(
        action="tenants.api_key.authenticate", outcome="failed", details__entry_point="gateway"
    ).exists()
    tenant_set_state(actor=actor_for(None), tenant=globex["tenant"], state=TenantState.SUSPENDED)
    keys.key_cache.clear()
    with pytest.raises(openai.PermissionDeniedError) as raised:
        _chat(_client(live_server_url, globex["key"]))
    assert raised.value.body["code"] == "tenant_suspended"


def test_key_without_inference_invoke_is_403(live_server_url, ref_workers, tenant_keys):
    from tenants.models import Role, RoleBinding
    from tenants.services import keys
    from tests.factories import HumanFactory, actor_for

    acme = tenant_keys["gw-acme"]
    viewer = HumanFactory()
    RoleBinding.objects.create(
        tenant=acme["tenant"], principal=viewer, role=Role.objects.get(name="tenant.viewer")
    )
    key = keys.api_key_create(actor=actor_for(viewer), tenant=acme["tenant"], name="mine")
    with pytest.raises(openai.PermissionDeniedError) as raised:
        _chat(_client(live_server_url, key.plaintext))
    assert raised.value.body["code"] == "permission_denied"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (
            {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
            404,
            "model_not_found",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 10**6},
            400,
            "max_tokens_too_large",
        ),
        ({"model": MODEL, "messages": []}, 400, "invalid_request"),
        (
            {
                "model": "gemini-2.5-flash",
                "messages": [{"role": "user", "content": "x"}],
                "temperature": "hot",
            },
            400,
            "invalid_request",
        ),
        (
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
                "stream_options": "usage",
            },
            400,
            "invalid_request",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "cache": "nope"},
            404,
            "cache_not_found",
        ),
    ],
)
def test_bad_requests_get_clear_errors(
    live_server_url, ref_workers, tenant_keys, body, status, code
):
    response = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {tenant_keys['gw-acme']['key']}"},
    )
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_malformed_json_and_oversized_bodies(live_server_url, ref_workers, tenant_keys, settings):
    headers = {
        "Authorization": f"Bearer {tenant_keys['gw-acme']['key']}",
        "Content-Type": "application/json",
    }
    broken = httpx.post(
        f"{live_server_url}/v1/chat/completions", content=b'{"model": ', headers=headers
    )
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "malformed_json"
    settings.CACHEPLANE_GATEWAY_MAX_BODY_BYTES = 2048
    huge = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        headers=headers,
        json={"model": MODEL, "messages": [{"role": "user", "content": "x" * 5000}]},
    )
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "payload_too_large"


def test_batch_traffic_is_shed_under_kv_memory_pressure(live_server_url, ref_workers, tenant_keys):
    from gateway.directory import directory
    from workers.models import Worker

    Worker.objects.update(metrics={"vllm:kv_cache_usage_perc": 0.93})
    directory.forget()
    headers = {"Authorization": f"Bearer {tenant_keys['gw-acme']['key']}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    batch = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        json=body,
        headers={**headers, "X-Cacheplane-Priority": "batch"},
    )
    assert batch.status_code == 429 and batch.headers["Retry-After"] == "5"
    assert batch.json()["error"]["code"] == "kv_memory_pressure"
    interactive = httpx.post(f"{live_server_url}/v1/chat/completions", json=body, headers=headers)
    assert interactive.status_code == 200


def test_failover_when_a_worker_is_down_and_503_when_all_are(
    live_server_url, ref_workers, tenant_keys
):
    from gateway.directory import directory
    from workers.models import Worker

    dead = Worker.objects.get(name="gw0")
    dead.base_url = "http://127.0.0.1:9"
    dead.save()
    directory.forget()
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    for n in range(4):  # whichever worker routing prefers, the answer comes from gw1
        assert _chat(client, content=f"{n} " + LONG_PROMPT).headers["x-cacheplane-worker"] == "gw1"
    Worker.objects.filter(name="gw1").update(base_url="http://127.0.0.2:9")
    directory.forget()
    with pytest.raises(openai.InternalServerError) as raised:
        _chat(client)
    assert raised.value.status_code == 503
    assert raised.value.body["code"] == "upstream_unavailable"


def test_usage_is_metered_to_the_ledger(live_server_url, ref_workers, tenant_keys):
    from billing.models import UsageRecord
    from billing.services.usage import usage_flush

    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    _chat(client)
    second = _chat(client).parse()
    usage_flush()
    rows = (
        UsageRecord.objects.all_tenants()
        .filter(tenant=tenant_keys["gw-acme"]["tenant"])
        .order_by("occurred_at")
    )
    assert rows.count() == 2
    last = rows.last()
    assert last.prompt_tokens == second.usage.prompt_tokens
    assert last.cached_read_tokens == second.usage.prompt_tokens_details.cached_tokens > 0
    assert last.output_tokens == second.usage.completion_tokens
    assert last.worker in {"gw0", "gw1"} and last.api_key_id == tenant_keys["gw-acme"]["key_row"].pk
    # How it was placed: reference workers publish no KV events, so never by the index.
    mode, _, reason = last.route.partition(":")
    assert mode == "approximate" and reason, last.route


def test_usage_goes_straight_to_the_ledger_when_the_queue_is_unreachable(tenant_keys, settings):
    from billing.models import UsageRecord
    from controlplane.embedded import free_port
    from gateway import closing
    from gateway.metering import Meter

    acme = tenant_keys["gw-acme"]
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    meter = Meter(
        request_id="req-no-redis",
        tenant_id=str(acme["tenant"].pk),
        tenant_slug="gw-acme",
        key_id=str(acme["key_row"].pk),
        principal_id=str(acme["sa"].pk),
        provider="vllm",
        model=MODEL,
        stream=False,
        started=0.0,
        prompt_tokens=100,
        cached_tokens=64,
        output_tokens=3,
    )
    # The gateway's own closing step, on a new loop (whose client follows REDIS_URL).
    asyncio.run(closing.close(None, meter))
    row = UsageRecord.objects.all_tenants().get(request_id="req-no-redis")
    assert (row.prompt_tokens, row.cached_read_tokens, row.output_tokens) == (100, 64, 3)


def test_a_finished_request_leaves_no_load_and_no_reservation_in_the_fleet_state(
    live_server_url, ref_workers, tenant_keys
):
    """The request's -1 rides on its closing round trip: once the answer is back, no
    replica counts it (in flight or reserved) on the worker it went to."""
    from controlplane import ops
    from gateway.directory import directory
    from workers import load_state

    headers = {"Authorization": f"Bearer {tenant_keys['gw-acme']['key']}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "load"}], "max_tokens": 2}
    answer = httpx.post(f"{live_server_url}/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200
    worker = answer.headers["x-cacheplane-worker"]
    redis = ops.redis_client()
    count = redis.hget(load_state.INFLIGHT_KEY, f"{directory.replica}|{worker}")
    assert count is not None and int(count) == 0
    assert redis.zcard(load_state.reserved_key(worker)) == 0
