"""The upstream stub of ``bench/gateway_overhead.py``: a raw ASGI app answering
``/v1/chat/completions`` at once, plain or streamed, with ``usage`` (a vLLM worker with no
model). Its own uvicorn process imports it (``gateway_stub:stub_app``): stdlib only.
"""

from __future__ import annotations

import json

MODEL = "bench/stub-model"

_STUB_BODY = json.dumps(
    {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 540,
            "completion_tokens": 1,
            "total_tokens": 541,
            "prompt_tokens_details": {"cached_tokens": 512},
        },
    }
).encode()
_USAGE = {"prompt_tokens": 540, "completion_tokens": 2, "total_tokens": 542}


def _chunk(delta: dict, finish: str | None, usage: dict | None) -> bytes:
    payload = {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


_STUB_STREAM = (
    _chunk({"role": "assistant", "content": "o"}, None, _USAGE)
    + _chunk({"content": "k"}, None, _USAGE)
    + _chunk({}, "stop", _USAGE)
    + b"data: "
    + json.dumps(
        {
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [],
            "usage": _USAGE,
        }
    ).encode()
    + b"\n\ndata: [DONE]\n\n"
)


async def stub_app(scope, receive, send) -> None:
    """Answer every HTTP request at once: the fixed completion, or its stream."""
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["path"].endswith("/models"):
        models = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": models.encode()})
        return
    stream = b'"stream":true' in body.replace(b" ", b"")
    payload = _STUB_STREAM if stream else _STUB_BODY
    kind = b"text/event-stream" if stream else b"application/json"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", kind), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
