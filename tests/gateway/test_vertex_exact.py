"""The Vertex data path made exact, through the official OpenAI SDK and the gateway against
the Vertex emulator: timeouts, blocked prompts, the parameters OpenAI accepts, the streamed
role, and audio priced as audio."""

from __future__ import annotations

import json
from decimal import Decimal

import openai
import pytest

from caches.models import TenantCacheSettings
from caches.services import lifecycle
from caches.services.execution import operation_execute
from tests.caches.conftest import big_content
from tests.factories import actor_for
from tests.gateway.support import price_vertex_flash_with_audio, usage_row_once_booked

pytestmark = pytest.mark.django_db(transaction=True)
FLASH = "gemini-2.5-flash"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def acme(tenant_keys, fresh_gateway, redis_flush):
    return tenant_keys["gw-acme"]


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def test_a_vertex_call_slower_than_the_gateway_timeout_is_504_upstream_timeout(
    live_server_url, acme, vertex, settings
):
    # The cache operations' timeout (the fixture's 10 s) must not apply to the gateway.
    settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS = 1
    held = vertex.hold_replies(path_contains=":generateContent")
    try:
        with pytest.raises(openai.APIStatusError) as raised:
            _client(live_server_url, acme["key"]).chat.completions.create(
                model=FLASH, messages=HI, max_tokens=5
            )
    finally:
        held.release()
    assert raised.value.status_code == 504
    assert raised.value.body["code"] == "upstream_timeout"
    assert "did not answer within 1 s" in raised.value.body["message"]


def test_a_lost_vertex_reply_is_a_502_that_names_the_failure(live_server_url, acme, vertex):
    vertex.drop_replies(path_contains=":generateContent")
    with pytest.raises(openai.APIStatusError) as raised:
        _client(live_server_url, acme["key"]).chat.completions.create(
            model=FLASH, messages=HI, max_tokens=5
        )
    assert raised.value.status_code == 502
    assert raised.value.body["code"] == "upstream_error"
    assert raised.value.body["message"].startswith("Vertex AI unreachable: ")
    assert len(raised.value.body["message"]) > len("Vertex AI unreachable: ")


def test_a_blocked_prompt_finishes_with_content_filter(live_server_url, acme, vertex):
    vertex.block_prompts_containing("forbidden")
    client = _client(live_server_url, acme["key"])
    blocked = [{"role": "user", "content": "something forbidden"}]
    completion = client.chat.completions.create(model=FLASH, messages=blocked, max_tokens=5)
    assert completion.choices[0].finish_reason == "content_filter"
    assert completion.choices[0].message.content == ""
    assert completion.usage.prompt_tokens > 0  # Vertex counts (and bills) the prompt
    stream = client.chat.completions.create(
        model=FLASH, messages=blocked, max_tokens=5, stream=True
    )
    assert [c.choices[0].finish_reason for c in stream if c.choices][-1] == "content_filter"
    fine = client.chat.completions.create(model=FLASH, messages=HI, max_tokens=5)
    assert fine.choices[0].finish_reason == "stop"


def test_logprobs_false_is_accepted_and_true_is_refused_by_name(live_server_url, acme, vertex):
    client = _client(live_server_url, acme["key"])
    completion = client.chat.completions.create(
        model=FLASH, messages=HI, max_tokens=5, logprobs=False
    )
    assert completion.choices[0].finish_reason == "stop"
    assert "logprobs" not in json.dumps(vertex.requests(path_contains=":generateContent")[-1].body)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=FLASH, messages=HI, max_tokens=5, logprobs=True)
    assert (raised.value.body["code"], raised.value.body["param"]) == (
        "unsupported_parameter",
        "logprobs",
    )


def test_stream_options_without_stream_is_refused_before_vertex_is_called(
    live_server_url, acme, vertex
):
    with pytest.raises(openai.BadRequestError) as raised:
        _client(live_server_url, acme["key"]).chat.completions.create(
            model=FLASH, messages=HI, max_tokens=5, stream_options={"include_usage": True}
        )
    assert raised.value.body["code"] == "stream_options_without_stream"
    assert raised.value.body["param"] == "stream_options"
    assert vertex.requests(path_contains=":generateContent") == []


def test_the_first_streamed_delta_carries_the_assistant_role(live_server_url, acme, vertex):
    vertex.set_stream_pacing(3, 0)
    stream = _client(live_server_url, acme["key"]).chat.completions.create(
        model=FLASH, messages=HI, max_tokens=50, stream=True
    )
    roles = [chunk.choices[0].delta.role for chunk in stream if chunk.choices]
    assert roles[0] == "assistant"
    assert set(roles[1:]) == {None}  # once, as OpenAI sends it


def test_audio_in_a_vertex_cache_is_priced_at_the_audio_rates(live_server_url, acme, vertex):
    from billing.models import ModelPrice

    price_vertex_flash_with_audio()
    tenant = acme["tenant"]
    TenantCacheSettings.objects.create(tenant=tenant, gcs_bucket_allow_list=["acme-audio"])
    content = big_content()
    content["documents"].append(
        {
            "id": "call",
            "uri": "gs://acme-audio/" + "call-recording-" * 40 + ".wav",
            "mime_type": "audio/wav",
        }
    )
    outcome = lifecycle.cache_create(
        tenant=tenant,
        actor=actor_for(acme["admin"]),
        spec=lifecycle.CacheSpec(name="calls", provider="vertex", model=FLASH, content=content),
    )
    operation_execute(operation_id=str(outcome.operation.pk))
    client = _client(live_server_url, acme["key"])
    response = client.chat.completions.with_raw_response.create(
        model=FLASH, messages=HI, max_tokens=5, extra_body={"cache": "calls"}
    )
    completion = response.parse()
    meta = vertex.requests(path_contains=":generateContent")[-1]
    assert meta.status == 200
    row = usage_row_once_booked(response.headers["x-request-id"])
    assert 0 < row.audio_cached_read_tokens == row.audio_prompt_tokens
    assert row.audio_cached_read_tokens < row.cached_read_tokens
    assert row.cached_read_tokens == completion.usage.prompt_tokens_details.cached_tokens
    price = ModelPrice.objects.get(provider="vertex", model=FLASH, superseded_at__isnull=True)
    text_cached = row.cached_read_tokens - row.audio_cached_read_tokens
    uncached = row.prompt_tokens - row.cached_read_tokens
    per_token = Decimal(1000)  # n$ per token for a rate of $1 per MTok
    expected = (
        text_cached * price.cached_input_per_mtok
        + row.audio_cached_read_tokens * price.audio_cached_input_per_mtok
        + uncached * price.input_per_mtok
        + row.output_tokens * price.output_per_mtok
    ) * per_token
    assert row.cost_nanos == int(expected.to_integral_value())


@pytest.mark.django_db(transaction=False)
def test_gemini_3_flash_has_its_published_audio_rates_seeded() -> None:
    from billing.models import ModelPrice

    price = ModelPrice.objects.get(
        provider="vertex", model="gemini-3-flash-preview", superseded_at__isnull=True
    )
    assert price.audio_input_per_mtok == Decimal("1.00")
    assert price.audio_cached_input_per_mtok == Decimal("0.10")
    assert price.input_per_mtok == Decimal("0.50")  # text unchanged


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_schema", "json_schema": "not an object"},
        {"type": "json_schema", "json_schema": ["schema"]},
        {"type": "json_schema", "json_schema": {"schema": "x"}},
        {"type": ["json_object"]},
        "json_object",
    ],
)
def test_a_malformed_response_format_is_a_400_never_a_500(
    live_server_url, acme, vertex, response_format
):
    with pytest.raises(openai.BadRequestError) as raised:
        _client(live_server_url, acme["key"]).chat.completions.create(
            model=FLASH, messages=HI, max_tokens=5, extra_body={"response_format": response_format}
        )
    assert raised.value.body["param"] == "response_format"
    assert vertex.requests(path_contains=":generateContent") == []
