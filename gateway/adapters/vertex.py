"""Vertex AI (Gemini) through google-genai: OpenAI chat/completions mapped both ways.

Honoured: ``max_tokens``/``max_completion_tokens`` → ``max_output_tokens``, ``stop`` →
``stop_sequences``, ``n`` → ``candidate_count``, ``seed``, ``temperature``, ``top_p``,
``presence_penalty``, ``frequency_penalty``, ``response_format`` (``json_object`` →
JSON mime type, ``json_schema`` → ``response_json_schema``), ``tools`` (function
declarations), ``tool_choice`` (auto / none / required / one function), tool calls and
tool results in the conversation, ``stream_options.include_usage``; ``user`` and
``logprobs: false`` are accepted and have no effect (``user`` tags requests at OpenAI; Gemini
has no equivalent). Everything else is a 400 ``unsupported_parameter`` naming it. A prompt
Vertex blocks (``promptFeedback.blockReason``) finishes with ``content_filter``.

A request naming a Vertex cache becomes ``generate_content(cached_content=...)``; Vertex
refuses a system instruction or tools beside a cache, so that is a clear 400 here.
Usage: ``promptTokenCount`` (cache included) → ``prompt_tokens``,
``cachedContentTokenCount`` → ``cached_tokens``, candidates + thoughts →
``completion_tokens`` (thinking is billed as output) with ``reasoning_tokens``.

This module is the adapter itself (validate, route to the scope's client, send, relay the
stream); the body translation lives in ``vertex_request`` and the response, usage and error
translation in ``vertex_response``.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from cachetools import TTLCache
from django.conf import settings

from controlplane.db import db_sync_to_async

if TYPE_CHECKING:
    from google import genai
    from google.genai import types as genai_types

from gateway.adapters.base import (
    CHARS_PER_TOKEN_ESTIMATE,
    Call,
    Target,
    Upstream,
    check_parameters,
    prompt_bound,
    prompt_estimate,
    refuse,
)
from gateway.adapters.vertex_request import (
    CHAT_PARAMETERS,
    COMPLETION_PARAMETERS,
    DEFAULT_MAX_OUTPUT_TOKENS,
    MAX_OUTPUT_TOKENS,
    MAX_STOP_SEQUENCES,
    request_contents,
    request_tools,
    response_format_config,
)
from gateway.adapters.vertex_response import (
    candidate_parts,
    completion_body,
    openai_usage,
    sse_event,
    upstream_error,
    usage_from_metadata,
)
from gateway.errors import GatewayError

_cache_tokens: TTLCache[str, int] = TTLCache(maxsize=50_000, ttl=60)  # event loop only


class VertexAdapter:
    provider = "vertex"

    def prepare(self, call: Call) -> None:
        from google.genai import types

        body = call.body
        if body.get("logprobs") is False:  # asks for nothing: accepted as OpenAI accepts it
            body = {name: value for name, value in body.items() if name != "logprobs"}
        check_parameters(
            body,
            allowed=CHAT_PARAMETERS if call.kind == "chat" else COMPLETION_PARAMETERS,
            provider="Vertex",
        )
        options = body.get("stream_options") or {}
        for name in options:
            if name != "include_usage":
                raise refuse(f"stream_options.{name}", "Vertex")
        if body.get("parallel_tool_calls") is False:
            raise refuse("parallel_tool_calls", "Vertex", "Gemini may always call several")
        n = body.get("n", 1)
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 8):
            raise GatewayError(400, "invalid_request", "'n' must be 1-8.", param="n")
        n = n or 1
        if n > 1 and call.stream:
            raise refuse("n", "Vertex", "several choices cannot be streamed")
        stop = body.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        if stop is not None and (
            not isinstance(stop, list)
            or len(stop) > MAX_STOP_SEQUENCES
            or not all(isinstance(s, str) and s for s in stop)
        ):
            raise GatewayError(
                400,
                "invalid_request",
                f"'stop' must be a string or a list of at most {MAX_STOP_SEQUENCES} strings.",
                param="stop",
            )
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise GatewayError(400, "invalid_request", "'seed' must be an integer.", param="seed")
        for name in ("presence_penalty", "frequency_penalty"):
            value = body.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise GatewayError(
                    400, "invalid_request", f"'{name}' must be a number.", param=name
                )
        contents, system = request_contents(call)
        tools, tool_config = request_tools(body) if call.kind == "chat" else (None, None)
        cache = call.cache
        if cache is not None and (system or tools):
            raise GatewayError(
                400,
                "cache_conflicts_with_system_or_tools",
                "A request using a Vertex cache cannot set a system message, tools or "
                "tool_choice: Vertex requires them to be part of the cache.",
            )
        given = body.get("max_completion_tokens") or body.get("max_tokens")
        config = types.GenerateContentConfig(
            max_output_tokens=given,
            temperature=body.get("temperature"),
            top_p=body.get("top_p"),
            candidate_count=n if n > 1 else None,
            stop_sequences=stop,
            seed=seed,
            presence_penalty=body.get("presence_penalty"),
            frequency_penalty=body.get("frequency_penalty"),
            cached_content=cache.remote_name if cache else None,
            system_instruction=system,
            tools=tools,
            tool_config=tool_config,
            **response_format_config(body),
        )
        call.upstream_body = (contents, config)
        # Without max_tokens Vertex allows up to the model's maximum: that is the bound.
        limit = MAX_OUTPUT_TOKENS.get(call.model)
        # No max_tokens on a model whose maximum is not known: nothing bounds the output
        # (the default only sizes a soft budget's hold; a hard budget refuses it).
        call.output_unbounded = given is None and limit is None
        call.max_output_tokens = int(given or limit or DEFAULT_MAX_OUTPUT_TOKENS) * n
        call.estimated_tokens = prompt_estimate(call) + call.max_output_tokens

    def pool_before_route(self, call: Call) -> str | None:
        """None: routing reads the cache's token count, which the price bound needs."""
        return None

    async def route(self, call: Call) -> Target:
        cached = await _cache_token_count(call.cache.id) if call.cache is not None else 0
        call.prompt_tokens_bound = prompt_bound(call) + cached
        call.extra["cache_tokens"] = cached
        return Target(
            pool="",
            share_key=f"vertex:{call.model}",
            capacity=settings.CACHEPLANE_GATEWAY_VERTEX_CONCURRENCY,
            state=await _client_for(call),
        )

    async def send(self, call: Call, target: Target) -> Upstream:
        client = target.state
        contents, config = call.upstream_body
        rid = f"{'chatcmpl' if call.kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        if not call.stream:
            try:
                result = await client.aio.models.generate_content(
                    model=call.model, contents=contents, config=config
                )
            except Exception as exc:
                raise upstream_error(exc) from None
            usage_from_metadata(call.usage, result.usage_metadata)
            return Upstream(body=json.dumps(completion_body(call, result, rid, created)).encode())
        try:
            stream = await client.aio.models.generate_content_stream(
                model=call.model, contents=contents, config=config
            )
            first = await anext(stream)
        except StopAsyncIteration:
            first = None
        except Exception as exc:  # before the first byte: the client gets the real status
            raise upstream_error(exc) from None
        result = Upstream()
        result.events = self._relay(call, stream, first, rid, created, result)
        return result

    async def _relay(
        self,
        call: Call,
        stream: AsyncIterator[genai_types.GenerateContentResponse],
        first: genai_types.GenerateContentResponse | None,
        rid: str,
        created: int,
        result: Upstream,
    ) -> AsyncIterator[bytes]:
        obj = "chat.completion.chunk" if call.kind == "chat" else "text_completion"
        streamed_chars = 0
        finish = "stop"
        role_sent = False  # OpenAI's first chat delta carries the role
        base = {"id": rid, "object": obj, "created": created, "model": call.model}
        # What a cut stream has used so far, should nothing better arrive: the prompt as
        # estimated (the provider processed it) and the characters streamed.
        call.usage.prompt_tokens = prompt_estimate(call) + call.extra.get("cache_tokens", 0)
        chunk = first
        try:
            while chunk is not None:
                if chunk.usage_metadata is not None and chunk.usage_metadata.prompt_token_count:
                    usage_from_metadata(call.usage, chunk.usage_metadata)
                text, tool_calls, reason = candidate_parts(chunk)
                finish = reason or finish
                streamed_chars += len(text)
                if not call.usage.reported:
                    call.usage.output_tokens = math.ceil(streamed_chars / CHARS_PER_TOKEN_ESTIMATE)
                if call.ttft_ms is None:
                    call.ttft_ms = int((time.perf_counter() - call.started) * 1000)
                if call.kind == "chat":
                    delta: dict[str, Any] = {"content": text} if text or not tool_calls else {}
                    if not role_sent:
                        delta = {"role": "assistant", **delta}
                        role_sent = True
                    if tool_calls:
                        delta["tool_calls"] = [
                            {"index": i, **tc} for i, tc in enumerate(tool_calls)
                        ]
                        finish = "tool_calls"
                    choice = {"index": 0, "delta": delta, "finish_reason": None}
                else:
                    choice = {"index": 0, "text": text, "finish_reason": None}
                yield sse_event({**base, "choices": [choice]})
                chunk = await anext(stream, None)
        except Exception as exc:
            call.extra["status"] = "upstream_error"
            yield sse_event(upstream_error(exc).body())
            return
        final = (
            {"index": 0, "delta": {}, "finish_reason": finish}
            if call.kind == "chat"
            else {"index": 0, "text": "", "finish_reason": finish}
        )
        yield sse_event({**base, "choices": [final]})
        if call.client_wants_usage:
            yield sse_event({**base, "choices": [], "usage": openai_usage(call.usage)})
        yield b"data: [DONE]\n\n"
        result.completed = True


async def _client_for(call: Call) -> genai.Client:
    """The genai client of the cache's scope (or the tenant's), from cached scopes, with
    the gateway's upstream timeout (not the cache operations' provider timeout)."""
    from caches.providers.vertex import vertex_client
    from gateway.directory import directory

    cache = call.cache
    if cache is not None and cache.vertex_scope is not None:
        scope = cache.vertex_scope
    else:
        scope = await directory.tenant_vertex_scope(call.identity.tenant_id)
    return vertex_client(
        scope, timeout_seconds=settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS
    )


def _load_cache_tokens(cache_id: str) -> int:
    from caches.models import CacheObject

    # all_tenants: the id comes from a cache view the caller already resolved in its tenant
    found = (
        CacheObject.objects.all_tenants()
        .filter(pk=cache_id)
        .values_list("token_count", flat=True)
        .first()
    )
    return int(found or 0)


async def _cache_token_count(cache_id: str) -> int:
    """The cache's token count (it never changes for a cache), cached a minute."""
    count = _cache_tokens.get(cache_id)
    if count is None:
        count = await db_sync_to_async(_load_cache_tokens)(cache_id)
        _cache_tokens[cache_id] = count
    return count
