"""Requests for Vertex models: ``generate_content`` through google-genai (async client).

A request naming a Vertex cache becomes ``generate_content(cached_content=<remote>)``;
as Vertex requires, such a request may not carry a system instruction or tools (they
belong in the cache): that is a clear 400 here rather than an opaque one upstream.
OpenAI messages map to Gemini contents (``assistant`` → ``model``); the answer and its
``usageMetadata`` map back to OpenAI's shapes (``cachedContentTokenCount`` →
``prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway import budget
from gateway.accounting import finish, meter_usage
from gateway.directory import CacheView
from gateway.errors import GatewayError
from gateway.identity import Identity
from gateway.metering import Meter
from gateway.requests import max_tokens, prompt_text


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _contents(body: dict[str, Any], kind: str, cache: CacheView | None):
    from google.genai import types

    if kind == "completion":
        prompt = body["prompt"] if isinstance(body["prompt"], str) else json.dumps(body["prompt"])
        return [types.Content(role="user", parts=[types.Part(text=prompt)])], None
    system, contents = [], []
    for message in body["messages"]:
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role in ("user", "assistant"):
            contents.append(
                types.Content(
                    role="model" if role == "assistant" else "user",
                    parts=[types.Part(text=_text(message.get("content")))],
                )
            )
        else:
            raise GatewayError(
                400, "invalid_request", f"Unsupported message role {role!r}.", param="messages"
            )
    if cache is not None and (system or body.get("tools") or body.get("tool_choice")):
        raise GatewayError(
            400,
            "cache_conflicts_with_system_or_tools",
            "A request using a Vertex cache cannot set a system message, tools or tool_choice: "
            "Vertex requires them to be part of the cache.",
        )
    return contents, ("\n".join(system) if system else None)


async def _client_for(identity: Identity, cache: CacheView | None):
    """The genai client of the cache's scope (or the tenant's), from cached scopes."""
    from caches.providers.vertex import vertex_client
    from gateway.directory import directory

    if cache is not None and cache.vertex_scope is not None:
        scope = cache.vertex_scope
    else:
        scope = await directory.tenant_vertex_scope(identity.tenant_id)
    return vertex_client(scope)


def _upstream_error(exc: Exception) -> GatewayError:
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        if exc.code == 429:
            return GatewayError(429, "upstream_rate_limited", exc.message or "Rate limited.")
        if exc.code == 404:
            return GatewayError(404, "cache_not_found", "The Vertex cache expired or is gone.")
        if exc.code == 400:
            return GatewayError(400, "upstream_rejected", exc.message or "Rejected by Vertex.")
        return GatewayError(502, "upstream_error", f"Vertex AI {exc.code}: {exc.message}")
    return GatewayError(502, "upstream_error", f"Vertex AI unreachable: {exc}")


def _usage(meta: Any) -> dict[str, Any]:
    prompt = int(getattr(meta, "prompt_token_count", 0) or 0)
    cached = int(getattr(meta, "cached_content_token_count", 0) or 0)
    output = int(getattr(meta, "candidates_token_count", 0) or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": cached} if cached else None,
    }


async def vertex_generate(
    request: Request,
    identity: Identity,
    body: dict[str, Any],
    kind: str,
    cache: CacheView | None,
    meter: Meter,
) -> Response:
    from google.genai import types

    contents, system = _contents(body, kind, cache)
    config = types.GenerateContentConfig(
        max_output_tokens=max_tokens(body),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        cached_content=cache.remote_name if cache else None,
        system_instruction=system,
    )
    client = await _client_for(identity, cache)
    reservation = await budget.reserve(
        meter,
        prompt_tokens=max(1, len(prompt_text(body, kind)) // 4),
        max_tokens=max_tokens(body),
        authenticated=identity.authenticated,
    )
    upstream_started = time.perf_counter()
    created = int(time.time())
    rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{meter.request_id}"
    if meter.stream:
        return StreamingResponse(
            _stream(client, body, kind, contents, config, meter, reservation, rid, created),
            media_type="text/event-stream",
            headers={
                "x-cacheplane-overhead-ms": f"{(upstream_started - meter.started) * 1000:.2f}",
                "x-request-id": meter.request_id,
            },
        )
    try:
        result = await client.aio.models.generate_content(
            model=meter.model, contents=contents, config=config
        )
    except Exception as exc:
        meter.status = "upstream_error"
        await finish(meter, reservation)
        raise _upstream_error(exc) from None
    upstream_ms = (time.perf_counter() - upstream_started) * 1000
    usage = _usage(result.usage_metadata)
    meter_usage(meter, usage)
    meter.ttft_ms = meter.latency_ms = int((time.perf_counter() - meter.started) * 1000)
    await finish(meter, reservation)
    text = result.text or ""
    finish_reason = _finish_reason(result)
    if kind == "chat":
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason,
        }
        payload = {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": meter.model,
            "choices": [choice],
            "usage": usage,
        }
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        payload = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": meter.model,
            "choices": [choice],
            "usage": usage,
        }
    total_ms = (time.perf_counter() - meter.started) * 1000
    return JSONResponse(
        payload,
        headers={
            "x-cacheplane-overhead-ms": f"{max(total_ms - upstream_ms, 0):.2f}",
            "x-request-id": meter.request_id,
        },
    )


def _finish_reason(result: Any) -> str:
    candidates = getattr(result, "candidates", None) or []
    reason = str(getattr(candidates[0], "finish_reason", "") or "") if candidates else ""
    return "length" if "MAX_TOKENS" in reason else "stop"


async def _stream(client, body, kind, contents, config, meter, reservation, rid, created):

    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    completed = False
    try:
        stream = await client.aio.models.generate_content_stream(
            model=meter.model, contents=contents, config=config
        )
        usage = None
        async for chunk in stream:
            if chunk.usage_metadata is not None:
                usage = _usage(chunk.usage_metadata)
            text = chunk.text or ""
            if meter.ttft_ms is None:
                meter.ttft_ms = int((time.perf_counter() - meter.started) * 1000)
            delta = (
                {"index": 0, "delta": {"content": text}, "finish_reason": None}
                if kind == "chat"
                else {"index": 0, "text": text, "finish_reason": None}
            )
            yield _sse(
                {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": meter.model,
                    "choices": [delta],
                }
            )
        final = (
            {"index": 0, "delta": {}, "finish_reason": "stop"}
            if kind == "chat"
            else {"index": 0, "text": "", "finish_reason": "stop"}
        )
        yield _sse(
            {"id": rid, "object": obj, "created": created, "model": meter.model, "choices": [final]}
        )
        if usage is not None:
            meter_usage(meter, usage)
            if include_usage:
                yield _sse(
                    {
                        "id": rid,
                        "object": obj,
                        "created": created,
                        "model": meter.model,
                        "choices": [],
                        "usage": usage,
                    }
                )
        yield b"data: [DONE]\n\n"
        completed = True
    except Exception as exc:
        meter.status = "upstream_error"
        yield _sse(_upstream_error(exc).body())
    finally:
        if not completed and meter.status == "ok":
            meter.status = "client_disconnect"
        await finish(meter, reservation)


def _sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


__all__ = ["vertex_generate"]
