"""The real OpenAI Python SDK as client: plain, streaming with usage, and ``cache_salt``."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from workers.engine.launcher import RunningWorker

MODEL = "test/ref-tiny"
SYSTEM = "You are a support agent for ACME. Answer from the knowledge base. " * 2


def test_openai_sdk_plain_and_streaming_with_cache_salt(
    make_worker: Callable[..., RunningWorker],
) -> None:
    worker = make_worker(api_keys=("sk-test",), enable_prompt_tokens_details=True)
    client = openai.OpenAI(base_url=f"{worker.base_url}/v1", api_key="sk-test", max_retries=0)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Refunds?"}]

    assert [m.id for m in client.models.list()] == [MODEL]

    first = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=6,
        temperature=0,
        extra_body={"cache_salt": "tenant-a"},
    )
    assert first.usage.prompt_tokens_details.cached_tokens == 0  # vLLM 0.32: 0, not null
    again = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=6,
        temperature=0,
        extra_body={"cache_salt": "tenant-a"},
    )
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached == (first.usage.prompt_tokens - 1) // 16 * 16
    other_tenant = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=6,
        temperature=0,
        extra_body={"cache_salt": "tenant-b"},
    )
    assert other_tenant.usage.prompt_tokens_details.cached_tokens == 0

    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"cache_salt": "tenant-a"},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == first.choices[0].message.content
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 6
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == cached
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"

    completion = client.completions.create(
        model=MODEL,
        prompt=SYSTEM,
        max_tokens=4,
        temperature=0,
        extra_body={"cache_salt": "tenant-a"},
    )
    assert completion.id.startswith("cmpl-")
    assert completion.choices[0].finish_reason == "length"
    streamed = client.completions.create(
        model=MODEL,
        prompt=SYSTEM,
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"cache_salt": "tenant-a"},
    )
    parts = list(streamed)
    assert "".join(p.choices[0].text for p in parts if p.choices) == completion.choices[0].text
    assert parts[-1].usage.prompt_tokens_details.cached_tokens > 0


def test_openai_sdk_sees_vllm_errors(make_worker: Callable[..., RunningWorker]) -> None:
    worker = make_worker(api_keys=("sk-test",))
    bad_key = openai.OpenAI(base_url=f"{worker.base_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad_key.models.list()
    client = openai.OpenAI(base_url=f"{worker.base_url}/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="missing", prompt="x", max_tokens=1)
    assert missing.value.body["type"] == "NotFoundError"
    with pytest.raises(openai.BadRequestError, match="cache_salt"):
        client.completions.create(
            model=MODEL, prompt="x", max_tokens=1, extra_body={"cache_salt": ""}
        )
