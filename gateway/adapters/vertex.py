"""Vertex AI (Gemini) through google-genai: OpenAI chat/completions mapped both ways.

Honoured: ``max_tokens``/``max_completion_tokens`` → ``max_output_tokens``, ``stop`` →
``stop_sequences``, ``n`` → ``candidate_count``, ``seed``, ``temperature``, ``top_p``,
``presence_penalty``, ``frequency_penalty``, ``response_format`` (``json_object`` →
JSON mime type, ``json_schema`` → ``response_json_schema``), ``tools`` (function
declarations), ``tool_choice`` (auto / none / required / one function), tool calls and
tool results in the conversation, ``stream_options.include_usage``; ``user`` is accepted
and has no effect (it tags requests at OpenAI; Gemini has no equivalent). Everything else
is a 400 ``unsupported_parameter`` naming it.

A request naming a Vertex cache becomes ``generate_content(cached_content=...)``; Vertex
refuses a system instruction or tools beside a cache, so that is a clear 400 here.
Usage: ``promptTokenCount`` (cache included) → ``prompt_tokens``,
``cachedContentTokenCount`` → ``cached_tokens``, candidates + thoughts →
``completion_tokens`` (thinking is billed as output) with ``reasoning_tokens``.
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
    Usage,
    check_parameters,
    prompt_bound,
    prompt_estimate,
    refuse,
)
from gateway.errors import GatewayError

#: Maximum output tokens per model (Google's model cards): the reservation's bound
#: when a request gives no ``max_tokens`` (Vertex then allows up to this).
MAX_OUTPUT_TOKENS = {
    "gemini-2.5-flash": 65_536,
    "gemini-2.5-pro": 65_536,
    "gemini-2.5-flash-lite": 65_536,
    "gemini-2.0-flash": 8_192,
    "gemini-3-flash-preview": 65_536,
    "gemini-3.1-pro-preview": 65_536,
}
DEFAULT_MAX_OUTPUT_TOKENS = 65_536
MAX_STOP_SEQUENCES = 5

_COMMON = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "user",
    }
)
CHAT_PARAMETERS = _COMMON | {
    "messages",
    "max_completion_tokens",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
}
COMPLETION_PARAMETERS = _COMMON | {"prompt"}
_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
}
_cache_tokens: TTLCache[str, int] = TTLCache(maxsize=50_000, ttl=60)  # event loop only


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for j, part in enumerate(content):
        if part.get("type") != "text":
            raise refuse(f"{where}.content[{j}].type={part.get('type')}", "Vertex")
        parts.append(part["text"])
    return "".join(parts)


def _contents(call: Call) -> tuple[list[genai_types.Content], str | None]:
    from google.genai import types

    body = call.body
    if call.kind == "completion":
        prompt = body["prompt"]
        if not isinstance(prompt, str):
            if len(prompt) != 1 or not isinstance(prompt[0], str):
                raise refuse("prompt", "Vertex", "only one text prompt per request")
            prompt = prompt[0]
        return [types.Content(role="user", parts=[types.Part(text=prompt)])], None
    system: list[str] = []
    contents: list[genai_types.Content] = []
    names: dict[str, str] = {}
    for i, message in enumerate(body["messages"]):
        role = message.get("role")
        where = f"messages[{i}]"
        if role in ("system", "developer"):
            system.append(_text(message.get("content"), where))
        elif role == "user":
            text = _text(message.get("content"), where)
            contents.append(types.Content(role="user", parts=[types.Part(text=text)]))
        elif role == "assistant":
            parts = []
            text = _text(message.get("content"), where)
            if text:
                parts.append(types.Part(text=text))
            for call_ in message.get("tool_calls") or []:
                function = call_.get("function") or {}
                names[str(call_.get("id"))] = str(function.get("name", ""))
                try:
                    args = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    raise GatewayError(
                        400,
                        "invalid_request",
                        f"{where}.tool_calls: arguments must be a JSON object.",
                        param="messages",
                    ) from None
                parts.append(
                    types.Part(
                        function_call=types.FunctionCall(name=function.get("name"), args=args)
                    )
                )
            contents.append(types.Content(role="model", parts=parts or [types.Part(text="")]))
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), "")
            if not name:
                raise GatewayError(
                    400,
                    "invalid_request",
                    f"{where}: tool_call_id names no earlier tool call.",
                    param="messages",
                )
            result = _text(message.get("content"), where)
            contents.append(
                types.Content(
                    role="user",
                    parts=[
                        types.Part(
                            function_response=types.FunctionResponse(
                                name=name, response={"content": result}
                            )
                        )
                    ],
                )
            )
        else:
            raise GatewayError(
                400, "invalid_request", f"Unsupported message role {role!r}.", param="messages"
            )
    return contents, ("\n".join(system) if system else None)


def _tools(
    body: dict[str, Any],
) -> tuple[genai_types.ToolListUnion | None, genai_types.ToolConfig | None]:
    from google.genai import types

    tools = body.get("tools")
    if not tools:
        return None, None
    if not isinstance(tools, list):
        raise GatewayError(400, "invalid_request", "'tools' must be a list.", param="tools")
    declarations = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise refuse(f"tools[{i}].type", "Vertex", "only function tools map to Gemini")
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise GatewayError(
                400, "invalid_request", f"tools[{i}].function.name is required.", param="tools"
            )
        declarations.append(
            types.FunctionDeclaration(
                name=function["name"],
                description=function.get("description"),
                parameters_json_schema=function.get("parameters"),
            )
        )
    choice = body.get("tool_choice", "auto")
    modes = types.FunctionCallingConfigMode
    mode, allowed = modes.AUTO, None
    if choice == "none":
        mode = modes.NONE
    elif choice == "required":
        mode = modes.ANY
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if choice.get("type") != "function" or not isinstance(name, str):
            raise refuse("tool_choice", "Vertex")
        mode, allowed = modes.ANY, [name]
    elif choice != "auto":
        raise refuse("tool_choice", "Vertex")
    config = types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(
            mode=mode, allowed_function_names=allowed
        )
    )
    return [types.Tool(function_declarations=declarations)], config


def _response_format(body: dict[str, Any]) -> dict[str, Any]:
    fmt = body.get("response_format")
    if fmt is None:
        return {}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"response_mime_type": "application/json"}
    if kind == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise GatewayError(
                400,
                "invalid_request",
                "response_format.json_schema.schema must be an object.",
                param="response_format",
            )
        return {"response_mime_type": "application/json", "response_json_schema": schema}
    raise refuse("response_format", "Vertex", f"type {kind!r}")


class VertexAdapter:
    provider = "vertex"

    def prepare(self, call: Call) -> None:
        from google.genai import types

        body = call.body
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
        contents, system = _contents(call)
        tools, tool_config = _tools(body) if call.kind == "chat" else (None, None)
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
            **_response_format(body),
        )
        call.upstream_body = (contents, config)
        # Without max_tokens Vertex allows up to the model's maximum: that is the bound.
        limit = MAX_OUTPUT_TOKENS.get(call.model, DEFAULT_MAX_OUTPUT_TOKENS)
        call.max_output_tokens = int(given or limit) * n
        call.estimated_tokens = prompt_estimate(call) + call.max_output_tokens

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
            _usage_into(call.usage, result.usage_metadata)
            return Upstream(body=json.dumps(_completion(call, result, rid, created)).encode())
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
        base = {"id": rid, "object": obj, "created": created, "model": call.model}
        # What a cut stream has used so far, should nothing better arrive: the prompt as
        # estimated (the provider processed it) and the characters streamed.
        call.usage.prompt_tokens = prompt_estimate(call) + call.extra.get("cache_tokens", 0)
        chunk = first
        try:
            while chunk is not None:
                if chunk.usage_metadata is not None and chunk.usage_metadata.prompt_token_count:
                    _usage_into(call.usage, chunk.usage_metadata)
                text, tool_calls, reason = _candidate(chunk)
                finish = reason or finish
                streamed_chars += len(text)
                if not call.usage.reported:
                    call.usage.output_tokens = math.ceil(streamed_chars / CHARS_PER_TOKEN_ESTIMATE)
                if call.ttft_ms is None:
                    call.ttft_ms = int((time.perf_counter() - call.started) * 1000)
                if call.kind == "chat":
                    delta: dict[str, Any] = {"content": text} if text or not tool_calls else {}
                    if tool_calls:
                        delta["tool_calls"] = [
                            {"index": i, **tc} for i, tc in enumerate(tool_calls)
                        ]
                        finish = "tool_calls"
                    choice = {"index": 0, "delta": delta, "finish_reason": None}
                else:
                    choice = {"index": 0, "text": text, "finish_reason": None}
                yield _sse({**base, "choices": [choice]})
                chunk = await anext(stream, None)
        except Exception as exc:
            call.extra["status"] = "upstream_error"
            yield _sse(upstream_error(exc).body())
            return
        final = (
            {"index": 0, "delta": {}, "finish_reason": finish}
            if call.kind == "chat"
            else {"index": 0, "text": "", "finish_reason": finish}
        )
        yield _sse({**base, "choices": [final]})
        if call.client_wants_usage:
            yield _sse({**base, "choices": [], "usage": _openai_usage(call.usage)})
        yield b"data: [DONE]\n\n"
        result.completed = True


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _candidate(chunk: Any, index: int = 0) -> tuple[str, list[dict[str, Any]], str | None]:
    candidates = getattr(chunk, "candidates", None) or []
    if len(candidates) <= index:
        return "", [], None
    candidate = candidates[index]
    texts, calls = [], []
    content = getattr(candidate, "content", None)
    for part in (getattr(content, "parts", None) or []) if content else []:
        if getattr(part, "thought", None):
            continue
        if part.text:
            texts.append(part.text)
        if part.function_call is not None:
            calls.append(
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {
                        "name": part.function_call.name,
                        "arguments": json.dumps(part.function_call.args or {}),
                    },
                }
            )
    raw = getattr(candidate, "finish_reason", None)
    reason = None
    if raw is not None:
        name = getattr(raw, "name", str(raw)).rsplit(".", 1)[-1]
        reason = _FINISH.get(name, "stop")
    return "".join(texts), calls, reason


def _completion(call: Call, result: Any, rid: str, created: int) -> dict[str, Any]:
    choices = []
    count = max(1, len(getattr(result, "candidates", None) or []))
    for index in range(count):
        text, tool_calls, reason = _candidate(result, index)
        if call.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_calls:
                message["tool_calls"] = tool_calls
                reason = "tool_calls"
            elif message["content"] is None:
                message["content"] = ""
            choices.append({"index": index, "message": message, "finish_reason": reason or "stop"})
        else:
            choices.append(
                {"index": index, "text": text, "finish_reason": reason or "stop", "logprobs": None}
            )
    return {
        "id": rid,
        "object": "chat.completion" if call.kind == "chat" else "text_completion",
        "created": created,
        "model": call.model,
        "choices": choices,
        "usage": _openai_usage(call.usage),
    }


def _usage_into(usage: Usage, meta: Any) -> None:
    if meta is None:
        return
    prompt = int(getattr(meta, "prompt_token_count", 0) or 0)
    prompt += int(getattr(meta, "tool_use_prompt_token_count", 0) or 0)
    thoughts = int(getattr(meta, "thoughts_token_count", 0) or 0)
    usage.prompt_tokens = prompt
    usage.cached_tokens = min(prompt, int(getattr(meta, "cached_content_token_count", 0) or 0))
    usage.output_tokens = int(getattr(meta, "candidates_token_count", 0) or 0) + thoughts
    usage.reasoning_tokens = thoughts
    usage.reported = True


def _openai_usage(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.prompt_tokens + usage.output_tokens,
        "prompt_tokens_details": (
            {"cached_tokens": usage.cached_tokens} if usage.cached_tokens else None
        ),
    }
    if usage.reasoning_tokens:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return out


def upstream_error(exc: Exception) -> GatewayError:
    """A Vertex failure in the gateway's shape: its status kept, Retry-After passed on."""
    from google.genai import errors

    if not isinstance(exc, errors.APIError):
        return GatewayError(502, "upstream_error", f"Vertex AI unreachable: {exc}")
    headers = {}
    response = getattr(exc, "response", None)
    retry_after = None
    if response is not None and getattr(response, "headers", None) is not None:
        retry_after = response.headers.get("retry-after")
    if retry_after:
        headers["Retry-After"] = str(retry_after)[:32]
    message = exc.message or f"Vertex AI answered {exc.code}."
    if exc.code == 429:
        return GatewayError(429, "upstream_rate_limited", message, headers=headers)
    if exc.code == 404:
        return GatewayError(404, "cache_not_found", "The Vertex cache expired or is gone.")
    if exc.code == 400:
        return GatewayError(400, "upstream_rejected", message)
    if exc.code in (401, 403):
        return GatewayError(
            502, "upstream_auth_failed", f"Vertex AI refused our credentials: {message}"
        )
    if exc.code == 503:
        return GatewayError(503, "upstream_unavailable", message, headers=headers)
    if exc.code == 504:
        return GatewayError(504, "upstream_timeout", message)
    return GatewayError(502, "upstream_error", f"Vertex AI {exc.code}: {message}")


async def _client_for(call: Call) -> genai.Client:
    """The genai client of the cache's scope (or the tenant's), from cached scopes."""
    from caches.providers.vertex import vertex_client
    from gateway.directory import directory

    cache = call.cache
    if cache is not None and cache.vertex_scope is not None:
        scope = cache.vertex_scope
    else:
        scope = await directory.tenant_vertex_scope(call.identity.tenant_id)
    return vertex_client(scope)


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
