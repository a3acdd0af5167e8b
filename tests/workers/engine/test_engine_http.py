"""The HTTP surface: vLLM's endpoints, status codes, error shape, auth and dev-mode gating."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx
import pytest

from workers.engine import VERSION
from workers.engine.launcher import RunningWorker

MODEL = "test/ref-tiny"


def _completion(worker: RunningWorker, **body: object) -> httpx.Response:
    payload = {"model": MODEL, "prompt": "hello world", "max_tokens": 4, "temperature": 0}
    return httpx.post(f"{worker.base_url}/v1/completions", json={**payload, **body})


def _assert_error(response: httpx.Response, status: int, err_type: str, text: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == (err_type, status)
    assert text in error["message"]


def test_completion_has_vllm_shape_and_block_aligned_cached_tokens(worker: RunningWorker) -> None:
    prompt = "The quick brown fox jumps over the lazy dog. " * 2  # 90 bytes + BOS = 91 tokens
    first = _completion(worker, prompt=prompt).json()
    second = _completion(worker, prompt=prompt).json()
    assert first["object"] == "text_completion" and first["id"].startswith("cmpl-")
    choice = first["choices"][0]
    assert set(choice) == {
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "prompt_logprobs",
    }
    assert choice["finish_reason"] == "length"
    assert first["usage"] == {
        "prompt_tokens": 91,
        "total_tokens": 95,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 0},  # vLLM 0.32: a miss is 0, not null
    }
    assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": 80}
    assert second["choices"][0]["text"] == choice["text"]
    assert first["kv_transfer_params"] is None


def test_cached_tokens_stay_null_without_the_details_flag(
    make_worker: Callable[..., RunningWorker],
) -> None:
    worker = make_worker()
    for _ in range(2):
        usage = _completion(worker, prompt="x" * 60).json()["usage"]
        assert usage["prompt_tokens_details"] is None


def test_chat_completion_uses_the_template_and_chat_ids(worker: RunningWorker) -> None:
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    tokens = httpx.post(f"{worker.base_url}/tokenize", json={"messages": messages}).json()
    rendered = "<|bos|><|system|>\nBe terse.<|eos|>\n<|user|>\nHi<|eos|>\n<|assistant|>\n"
    detok = httpx.post(f"{worker.base_url}/detokenize", json={"tokens": tokens["tokens"]})
    assert detok.json() == {"prompt": rendered}
    response = httpx.post(
        f"{worker.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": messages, "max_tokens": 3},
        headers={"X-Request-Id": "abc123"},
    ).json()
    assert response["id"] == "chatcmpl-abc123"
    assert response["object"] == "chat.completion"
    assert response["choices"][0]["message"]["role"] == "assistant"
    assert response["usage"]["prompt_tokens"] == tokens["count"]


def test_request_id_comes_from_the_header_first_then_the_body(worker: RunningWorker) -> None:
    assert _completion(worker, request_id="body-id").json()["id"] == "cmpl-body-id"
    response = httpx.post(
        f"{worker.base_url}/v1/completions",
        json={"model": MODEL, "prompt": "hi", "max_tokens": 1, "request_id": "body-id"},
        headers={"X-Request-Id": "header-id"},
    )
    assert response.json()["id"] == "cmpl-header-id"


def test_streaming_completion_ends_with_usage_and_done(worker: RunningWorker) -> None:
    body = {
        "model": MODEL,
        "prompt": "stream me",
        "max_tokens": 5,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{worker.base_url}/v1/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 10,
        "total_tokens": 15,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    streamed = "".join(c["choices"][0]["text"] for c in chunks[:-1])
    assert (
        streamed
        == _completion(worker, prompt="stream me", max_tokens=5).json()["choices"][0]["text"]
    )


def test_batched_prompts_and_n_return_one_choice_each(worker: RunningWorker) -> None:
    response = _completion(worker, prompt=["one", [256, 50, 51]], n=2, seed=3, temperature=1.0)
    body = response.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["prompt_tokens"] == 4 + 3
    assert body["usage"]["completion_tokens"] == 16


def test_concurrent_requests_all_complete_with_sequential_results(worker: RunningWorker) -> None:
    prompts = [f"request number {i} " * 5 for i in range(6)]
    sequential = [_completion(worker, prompt=p, max_tokens=8).json() for p in prompts]

    async def fire() -> list[dict]:
        async with httpx.AsyncClient(base_url=worker.base_url, timeout=60) as client:
            calls = [
                client.post(
                    "/v1/completions",
                    json={"model": MODEL, "prompt": p, "max_tokens": 8, "temperature": 0},
                )
                for p in prompts
            ]
            return [r.json() for r in await asyncio.gather(*calls)]

    concurrent = asyncio.run(fire())
    texts = [r["choices"][0]["text"] for r in concurrent]
    assert texts == [r["choices"][0]["text"] for r in sequential]


@pytest.mark.parametrize("salt", ["", 5, []])
def test_empty_or_non_string_cache_salt_is_rejected(worker: RunningWorker, salt: object) -> None:
    _assert_error(_completion(worker, cache_salt=salt), 400, "Bad Request", "cache_salt")


def test_unknown_model_is_404_in_the_error_shape(worker: RunningWorker) -> None:
    _assert_error(_completion(worker, model="nope"), 404, "NotFoundError", "`nope` does not exist")
    response = httpx.post(f"{worker.base_url}/tokenize", json={"model": "nope", "prompt": "x"})
    assert response.status_code == 404


def test_prompt_longer_than_the_context_is_400(worker: RunningWorker) -> None:
    _assert_error(
        _completion(worker, prompt="y" * 600), 400, "BadRequestError", "maximum context length"
    )
    _assert_error(
        _completion(worker, prompt="y" * 100, max_tokens=500), 400, "BadRequestError", "too large"
    )


def test_malformed_json_and_wrong_content_type(worker: RunningWorker) -> None:
    url = f"{worker.base_url}/v1/completions"
    bad_json = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    _assert_error(bad_json, 400, "Bad Request", "JSON")
    not_an_object = httpx.post(url, json=[1, 2])
    _assert_error(not_an_object, 400, "Bad Request", "dictionary")
    for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
        response = httpx.post(
            f"{worker.base_url}{path}", content=b"prompt=hi", headers={"content-type": "text/plain"}
        )
        # vLLM 0.32 answers 400 (a request validation error), not 415.
        _assert_error(response, 400, "BadRequestError", "application/json")


def test_api_key_guards_v1_paths_only(make_worker: Callable[..., RunningWorker]) -> None:
    worker = make_worker(api_keys=("sekret",))
    base = worker.base_url
    assert httpx.get(f"{base}/v1/models").status_code == 401
    assert httpx.get(f"{base}/v1/models").json() == {"error": "Unauthorized"}
    wrong = httpx.get(f"{base}/v1/models", headers={"Authorization": "Bearer other"})
    assert wrong.status_code == 401
    right = httpx.get(f"{base}/v1/models", headers={"Authorization": "Bearer sekret"})
    assert right.status_code == 200
    for path in ("/health", "/metrics", "/version", "/load", "/ping"):
        assert httpx.get(f"{base}{path}").status_code == 200, path
    assert httpx.post(f"{base}/tokenize", json={"prompt": "hi"}).status_code == 200


def test_dev_endpoints_are_404_without_dev_mode(worker: RunningWorker) -> None:
    base = worker.base_url
    for path in ("/reset_prefix_cache", "/sleep", "/wake_up"):
        assert httpx.post(f"{base}{path}").status_code == 404, path
    assert httpx.get(f"{base}/is_sleeping").status_code == 404


def test_dev_mode_reset_and_sleep(make_worker: Callable[..., RunningWorker]) -> None:
    worker = make_worker(dev_mode=True, enable_prompt_tokens_details=True)
    base = worker.base_url
    _completion(worker, prompt="z" * 50)
    assert _completion(worker, prompt="z" * 50).json()["usage"]["prompt_tokens_details"]
    reset = httpx.post(f"{base}/reset_prefix_cache?reset_running_requests=false")
    assert (reset.status_code, reset.json()) == (200, {"success": True})  # vLLM 0.32's body
    assert _completion(worker, prompt="z" * 50).json()["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 0
    }
    assert httpx.get(f"{base}/is_sleeping").json() == {"is_sleeping": False}
    assert httpx.post(f"{base}/sleep?level=2").status_code == 200
    assert httpx.get(f"{base}/is_sleeping").json() == {"is_sleeping": True}
    assert httpx.post(f"{base}/wake_up?tags=weights&tags=kv_cache").status_code == 200
    assert httpx.get(f"{base}/is_sleeping").json() == {"is_sleeping": False}
    after = _completion(worker, prompt="z" * 50).json()
    # Sleep dropped the prefix cache: a miss (0).
    assert after["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_models_version_health_load_and_tokenize(worker: RunningWorker) -> None:
    base = worker.base_url
    models = httpx.get(f"{base}/v1/models").json()
    (card,) = models["data"]
    assert models["object"] == "list"
    assert (card["id"], card["object"], card["owned_by"], card["root"]) == (
        MODEL,
        "model",
        "vllm",
        MODEL,
    )
    assert card["max_model_len"] == 512 and card["parent"] is None
    assert card["permission"][0]["object"] == "model_permission"
    assert httpx.get(f"{base}/version").json() == {"version": VERSION}
    health = httpx.get(f"{base}/health")
    assert (health.status_code, health.content) == (200, b"")
    assert httpx.post(f"{base}/ping").status_code == 200
    assert httpx.get(f"{base}/load").json() == {"server_load": 0}
    tok = httpx.post(f"{base}/tokenize", json={"prompt": "héllo", "return_token_strs": True})
    assert tok.json() == {
        "count": 7,
        "max_model_len": 512,
        "tokens": [256, 104, 195, 169, 108, 108, 111],
        "token_strs": ["<|bos|>", "h", "Ã", "©", "l", "l", "o"],
    }
    bad = httpx.post(f"{base}/detokenize", json={"tokens": [1, 999]})
    _assert_error(bad, 400, "BadRequestError", "out of vocabulary")
    assert httpx.get(f"{base}/metrics/").status_code == 200


def test_load_counts_in_flight_requests_when_tracking_is_on(
    make_worker: Callable[..., RunningWorker],
) -> None:
    worker = make_worker(enable_server_load_tracking=True, enable_request_id_headers=True)
    body = {"model": MODEL, "prompt": "busy", "max_tokens": 400, "stream": True}
    with httpx.stream(
        "POST", f"{worker.base_url}/v1/completions", json=body, headers={"X-Request-Id": "r1"}
    ) as response:
        assert response.headers["x-request-id"] == "r1"
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        assert httpx.get(f"{worker.base_url}/load").json() == {"server_load": 1}
        assert [line for line in lines if line][-1] == "data: [DONE]"
    assert httpx.get(f"{worker.base_url}/load").json() == {"server_load": 0}


def test_client_disconnect_mid_stream_aborts_the_request(worker: RunningWorker) -> None:
    body = {"model": MODEL, "prompt": "long one", "max_tokens": 480, "stream": True}
    with httpx.stream("POST", f"{worker.base_url}/v1/completions", json=body) as response:
        assert next(response.iter_lines()).startswith("data: ")
    registry = worker.engine.metrics.registry
    labels = {"model_name": MODEL, "engine": "0", "finished_reason": "abort"}
    for _ in range(200):  # the server notices on its next write to the closed socket
        if registry.get_sample_value("vllm:request_success_total", labels) == 1.0:
            break
        time.sleep(0.01)
    assert registry.get_sample_value("vllm:request_success_total", labels) == 1.0
    snapshot = worker.engine.snapshot()
    assert (snapshot["running"], snapshot["usage"]) == (0, 0.0)
