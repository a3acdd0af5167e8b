"""OpenAI fidelity: parameters honoured or refused by name, real upstream statuses, strict
bodies, OpenAI-shaped errors everywhere (checked with the official SDK's exceptions)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import httpx
import openai
import pytest

from tests.gateway.conftest import MODEL

FLASH = "gemini-2.5-flash"


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def _post(url: str, key: str, content: bytes | str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        content=content,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json", **headers},
        timeout=30,
    )


@pytest.mark.parametrize(
    ("model", "extra", "param"),
    [
        (MODEL, {"kv_transfer_params": {"do_remote_prefill": True}}, "kv_transfer_params"),
        (MODEL, {"audio": {"voice": "alloy"}}, "audio"),
        (FLASH, {"logprobs": True}, "logprobs"),
        (FLASH, {"logit_bias": {"1": 5}}, "logit_bias"),
        (FLASH, {"ignore_eos": True}, "ignore_eos"),
    ],
)
def test_parameters_a_provider_cannot_honour_are_refused_by_name(
    live_server_url, ref_workers, tenant_keys, vertex, model, extra, param
):
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            extra_body=extra,
        )
    assert raised.value.body["code"] == "unsupported_parameter"
    assert raised.value.body["param"] == param
    assert vertex.requests(path_contains=":generateContent") == []


def test_vertex_maps_tools_response_format_stop_n_seed_and_max_output(
    live_server_url, ref_workers, tenant_keys, vertex
):
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    weather = {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    completion = client.chat.completions.create(
        model=FLASH,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
        ],
        tools=[weather],
        tool_choice={"type": "function", "function": {"name": "weather"}},
        response_format={"type": "json_object"},
        stop=["END"],
        n=2,
        seed=7,
        max_tokens=64,
        temperature=0.2,
    )
    assert completion.choices and completion.usage.completion_tokens > 0
    sent = vertex.requests(path_contains=":generateContent")[-1].body
    config = sent["generationConfig"]
    assert config["maxOutputTokens"] == 64
    assert config["stopSequences"] == ["END"]
    assert config["candidateCount"] == 2
    assert config["seed"] == 7
    assert config["responseMimeType"] == "application/json"
    declaration = sent["tools"][0]["functionDeclarations"][0]
    assert declaration["name"] == "weather"
    calling = sent["toolConfig"]["functionCallingConfig"]
    assert calling["mode"] == "ANY"
    assert calling.get("allowedFunctionNames", calling.get("allowed_function_names")) == ["weather"]
    assert sent["systemInstruction"]["parts"][0]["text"] == "Be brief."
    roles = [c["role"] for c in sent["contents"]]
    assert roles == ["user", "model", "user"]
    assert sent["contents"][1]["parts"][0]["functionCall"]["args"] == {"city": "Oslo"}
    assert sent["contents"][2]["parts"][0]["functionResponse"]["name"] == "weather"


def test_vertex_without_max_tokens_sends_no_output_cap(
    live_server_url, ref_workers, tenant_keys, vertex
):
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    client.chat.completions.create(model=FLASH, messages=[{"role": "user", "content": "hi"}])
    sent = vertex.requests(path_contains=":generateContent")[-1].body
    assert "maxOutputTokens" not in sent.get("generationConfig", {})  # not a silent 16


def test_a_stream_that_fails_before_its_first_byte_returns_the_real_status(
    live_server_url, ref_workers, tenant_keys, vertex
):
    # Every try (the SDK retries 429s itself) is refused.
    vertex.inject_fault(429, count=None, path_contains=":streamGenerateContent")
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    with pytest.raises(openai.RateLimitError) as raised:
        list(
            client.chat.completions.create(
                model=FLASH,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=5,
                stream=True,
            )
        )
    assert raised.value.body["code"] == "upstream_rate_limited"


@contextlib.contextmanager
def _limited_worker():
    """A vLLM-protocol endpoint that answers every completion 429 with Retry-After (what a
    saturated vLLM behind a proxy answers)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def limited(request):
        await request.body()
        return JSONResponse(
            {
                "object": "error",
                "message": "Too many requests",
                "type": "RateLimitError",
                "param": None,
                "code": 429,
            },
            status_code=429,
            headers={"Retry-After": "7"},
        )

    app = Starlette(routes=[Route("/v1/chat/completions", limited, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_upstream_429_keeps_its_retry_after_and_worker_errors_are_reshaped(
    live_server_url, fresh_gateway, redis_flush, tenant_keys
):
    from tenants.actor import Actor
    from workers.services import worker_register

    with _limited_worker() as url:
        worker_register(actor=Actor.cli(), name="limited", base_url=url, model="test/limited")
        response = _post(
            live_server_url,
            tenant_keys["gw-acme"]["key"],
            json.dumps({"model": "test/limited", "messages": [{"role": "user", "content": "x"}]}),
        )
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["code"] == "upstream_rate_limited"
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_tools_for_a_model_only_reference_workers_serve_are_refused_by_name(
    live_server_url, ref_workers, tenant_keys
):
    """The gateway knows the reference worker has no tools and refuses before routing
    (docs/vllm-protocol.md), as it refuses every parameter the serving engine cannot do."""
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    assert raised.value.body["code"] == "unsupported_parameter"
    assert raised.value.body["param"] == "tools"


def test_a_workers_own_400_is_reshaped_as_upstream_rejected_with_its_param(
    live_server_url, ref_workers, tenant_keys
):
    """A negative ``temperature`` passes the gateway (it checks only that it is a number;
    the range is each engine's) and the reference worker refuses it as vLLM does: the
    worker's 400 reaches the client as ``upstream_rejected``, its message and param kept."""
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            temperature=-1,
        )
    assert raised.value.status_code == 400
    assert raised.value.body["code"] == "upstream_rejected"
    assert raised.value.body["param"] == "temperature"
    assert "temperature must be non-negative" in raised.value.body["message"]


_USER_X = '[{"role": "user", "content": "x"}]'


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 5000 + "]" * 5000,
        '{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
        '{"model": "m", "messages": [{"role": "user", "content": "a\\u0000b"}]}',
        '{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}',
        # Duplicate keys: which one wins differs between parsers (a smuggling vector);
        # refused at the top level and nested (docs/security/access-control.md).
        f'{{"model": "{MODEL}", "model": "{MODEL}", "messages": {_USER_X}}}',
        f'{{"model": "{MODEL}", "messages": [{{"role": "user", "content": "x", "content": "y"}}]}}',
        f'{{"model": "{MODEL}", "messages": {_USER_X}, "max_tokens": 1, "max_tokens": 100000}}',
    ],
)
def test_hostile_json_is_a_400_never_a_500(live_server_url, ref_workers, tenant_keys, raw):
    response = _post(live_server_url, tenant_keys["gw-acme"]["key"], raw)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"


@pytest.mark.parametrize(
    "content",
    [[{"type": "text", "text": 5}], [7], [{"text": "no type"}], {"a": 1}],
)
def test_non_string_content_parts_are_refused(live_server_url, ref_workers, tenant_keys, content):
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
    response = _post(live_server_url, tenant_keys["gw-acme"]["key"], json.dumps(body))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_a_chunked_body_is_cut_off_at_the_limit(
    live_server_url, ref_workers, tenant_keys, settings
):
    settings.CACHEPLANE_GATEWAY_MAX_BODY_BYTES = 2048
    sent = 0

    def chunks():
        nonlocal sent
        yield b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "'
        for _ in range(1000):  # 1 MB if the gateway read it all
            sent += 1
            yield b"x" * 1024
        yield b'"}]}'

    response = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        content=chunks(),
        headers={"authorization": f"Bearer {tenant_keys['gw-acme']['key']}"},
        timeout=30,
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_unknown_paths_and_methods_answer_openai_json(live_server_url):
    missing = httpx.get(f"{live_server_url}/v1/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong = httpx.get(f"{live_server_url}/v1/chat/completions")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in wrong.headers["allow"]


def test_all_workers_of_a_model_down_is_503_no_worker(live_server_url, ref_workers, tenant_keys):
    from workers.models import Worker, WorkerState

    Worker.objects.filter(model=MODEL).update(state=WorkerState.UNHEALTHY)
    client = _client(live_server_url, tenant_keys["gw-acme"]["key"])
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert raised.value.status_code == 503
    assert raised.value.body["code"] == "no_worker"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="no/such-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
