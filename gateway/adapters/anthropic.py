"""Anthropic Messages: OpenAI chat in (translated), or Anthropic's own shape in on
``/v1/messages`` (relayed as is), both through the same pipeline steps.

prepare: check the parameters (400 ``unsupported_parameter`` naming what Anthropic cannot
honour), build the Messages body, bound the prompt (bytes of what is sent) and the output
(``max_tokens``; the model's maximum when an OpenAI client gives none). route: the
tenant's credential, then the cache-breakpoint autopilot (``gateway.adapters.autopilot``)
on the body. send: ``POST {base}/v1/messages`` with the tenant's key; usage from the body
or from ``message_start`` / ``message_delta`` (``anthropic_shapes.usage_merge``). A
stream cut off (by the client or Anthropic) books the input side ``message_start``
reported (Anthropic bills it) and the output streamed so far, at the provider's larger of
its last cumulative count and the characters streamed / 4; with extended ``thinking`` the
Claude 4 models stream a summary of their thinking and bill the whole of it, so a stream
cut before ``message_delta`` books the request's reservation, flagged as an estimate
(``Call.cut_cost_known``).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from gateway import upstream
from gateway.adapters import autopilot
from gateway.adapters.anthropic_shapes import (
    STOP_REASONS,
    chat_body,
    messages_from_chat,
    openai_usage,
    tools_from_chat,
    usage_merge,
)
from gateway.adapters.base import (
    CHARS_PER_TOKEN_ESTIMATE,
    Call,
    Target,
    Upstream,
    check_parameters,
    json_bytes,
    refuse,
)
from gateway.adapters.hosted import base_url, hosted_model, hosted_target, post, sse
from gateway.errors import GatewayError

API_VERSION = "2023-06-01"
MESSAGES_PARAMETERS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "metadata",
        "thinking",
        "service_tier",
        "cache_control",  # automatic caching: a breakpoint on the last block
    }
)
CHAT_PARAMETERS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
    }
)
_RELAYED_HEADERS = ("request-id", "anthropic-organization-id")


class AnthropicAdapter:
    provider = "anthropic"

    def prepare(self, call: Call) -> None:
        body = call.body
        if call.kind == "messages":
            check_parameters(body, allowed=MESSAGES_PARAMETERS, provider="Anthropic")
            if not isinstance(body.get("max_tokens"), int):
                raise GatewayError(
                    400, "invalid_request", "'max_tokens' is required.", param="max_tokens"
                )
            sent = dict(body)
        elif call.kind == "chat":
            check_parameters(body, allowed=CHAT_PARAMETERS, provider="Anthropic")
            for name in body.get("stream_options") or {}:
                if name != "include_usage":
                    raise refuse(f"stream_options.{name}", "Anthropic")
            messages, system = messages_from_chat(body)
            sent = {"model": call.model, "messages": messages}
            if system:
                sent["system"] = system
            sent.update(tools_from_chat(body))
            given = body.get("max_completion_tokens") or body.get("max_tokens")
            sent["max_tokens"] = int(given or hosted_model(call).max_output_tokens)
            for name in ("temperature", "top_p"):
                if body.get(name) is not None:
                    sent[name] = body[name]
            stop = body.get("stop")
            if stop is not None:
                sent["stop_sequences"] = [stop] if isinstance(stop, str) else stop
            if body.get("user"):
                sent["metadata"] = {"user_id": str(body["user"])}
            if call.stream:
                sent["stream"] = True
        else:
            raise refuse("prompt", "Anthropic", "use /v1/chat/completions or /v1/messages")
        call.upstream_body = sent
        # Summarized thinking is billed in full: what was streamed does not say what a
        # cut stream cost until message_delta reports the output.
        thinking = sent.get("thinking")
        call.cut_cost_known = not isinstance(thinking, dict) or thinking.get("type") in (
            None,
            "disabled",
        )
        call.max_output_tokens = int(sent["max_tokens"])
        carried = sum(json_bytes(sent[k]) for k in ("messages", "system", "tools") if k in sent)
        call.prompt_tokens_bound = carried + 16
        call.estimated_tokens = carried // CHARS_PER_TOKEN_ESTIMATE + 1 + call.max_output_tokens

    def pool_before_route(self, call: Call) -> str | None:
        return ""  # per-token prices: no pool, so routing and admission run at once

    async def route(self, call: Call) -> Target:
        target = await hosted_target(call, self.provider)
        if target.state.cache_autopilot:
            call.extra["autopilot"] = await autopilot.place_breakpoints(
                tenant_id=call.identity.tenant_id,
                model=hosted_model(call),
                body=call.upstream_body,
            )
        return target

    async def send(self, call: Call, target: Target) -> Upstream:
        response = await post(
            self.provider,
            f"{base_url(self.provider)}/v1/messages",
            call.upstream_body,
            {"x-api-key": target.state.secret, "anthropic-version": API_VERSION},
        )
        headers = {
            f"x-upstream-{name}": response.headers[name]
            for name in _RELAYED_HEADERS
            if name in response.headers
        }
        headers.update(
            {k: v for k, v in response.headers.items() if k.lower().startswith("anthropic-rate")}
        )
        if call.extra.get("autopilot"):
            headers["x-cacheplane-autopilot"] = call.extra["autopilot"]
        if not call.stream:
            try:
                raw = await response.aread()
            finally:
                await response.aclose()
            answer = json.loads(raw)
            usage_merge({}, answer.get("usage"), call.usage)
            if call.kind == "chat":
                raw = json.dumps(
                    chat_body(
                        answer,
                        rid=f"chatcmpl-{answer.get('id', uuid.uuid4().hex)}",
                        created=int(time.time()),
                        model=call.model,
                        usage=call.usage,
                    )
                ).encode()
            return Upstream(body=raw, headers=headers)
        result = Upstream(headers=headers, close=response.aclose)
        relay = self._relay_messages if call.kind == "messages" else self._relay_chat
        result.events = relay(call, response, result)
        return result

    async def _events(
        self, call: Call, response: upstream.Response, state: dict[str, Any]
    ) -> AsyncIterator[tuple[bytes, dict[str, Any]]]:
        """Each upstream event with its JSON, usage and streamed characters booked."""
        seen: dict[str, Any] = {}
        data: dict[str, Any]
        events = upstream.sse_events(response)
        while True:
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
            except Exception as exc:  # the provider's connection broke mid-stream
                data = {"type": "error", "error": {"type": "api_error", "message": str(exc)}}
                event = sse(data, "error")
            else:
                data = upstream.parse_sse_event(event) or {}
            kind = data.get("type")
            if kind == "message_start":
                usage_merge(seen, (data.get("message") or {}).get("usage"), call.usage)
                state["output_reported"] = call.usage.output_tokens
            elif kind == "content_block_delta":
                delta = data.get("delta") or {}
                state["chars"] += sum(
                    len(delta.get(k) or "") for k in ("text", "thinking", "partial_json")
                )
                if call.ttft_ms is None:
                    call.ttft_ms = int((time.perf_counter() - call.started) * 1000)
            elif kind == "message_delta":
                usage_merge(seen, data.get("usage"), call.usage)
                state["output_reported"] = call.usage.output_tokens
                state["final"] = True
                call.cut_cost_known = True  # the whole output, thinking included
            elif kind == "error":
                call.extra["status"] = "upstream_error"
            if not state["final"]:
                # Until message_delta: what Anthropic has produced so far is at least
                # what was streamed (it bills what it generated).
                streamed = math.ceil(state["chars"] / CHARS_PER_TOKEN_ESTIMATE)
                call.usage.output_tokens = max(state["output_reported"], streamed)
            yield event, data

    async def _relay_messages(
        self, call: Call, response: upstream.Response, result: Upstream
    ) -> AsyncIterator[bytes]:
        state: dict[str, Any] = {"chars": 0, "output_reported": 0, "final": False}
        async for event, data in self._events(call, response, state):
            yield event
            # An error event ends the relay too: booked as upstream_error, not as a
            # client that went away.
            if data.get("type") in ("message_stop", "error"):
                result.completed = True
            if data.get("type") == "error":
                return

    async def _relay_chat(
        self, call: Call, response: upstream.Response, result: Upstream
    ) -> AsyncIterator[bytes]:
        state: dict[str, Any] = {"chars": 0, "output_reported": 0, "final": False}
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        base = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": call.model,
        }
        finish = "stop"
        tools: dict[int, int] = {}  # content block index → tool call index

        def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
            return sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]})

        async for _, data in self._events(call, response, state):
            kind = data.get("type")
            if kind == "message_start":
                yield chunk({"role": "assistant", "content": ""})
            elif kind == "content_block_start":
                block = data.get("content_block") or {}
                if block.get("type") == "tool_use":
                    tools[data.get("index", 0)] = len(tools)
                    yield chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": tools[data.get("index", 0)],
                                    "id": block.get("id", ""),
                                    "type": "function",
                                    "function": {"name": block.get("name", ""), "arguments": ""},
                                }
                            ]
                        }
                    )
            elif kind == "content_block_delta":
                delta = data.get("delta") or {}
                if delta.get("type") == "text_delta":
                    yield chunk({"content": delta.get("text", "")})
                elif delta.get("type") == "input_json_delta":
                    yield chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": tools.get(data.get("index", 0), 0),
                                    "function": {"arguments": delta.get("partial_json", "")},
                                }
                            ]
                        }
                    )
            elif kind == "message_delta":
                reason = (data.get("delta") or {}).get("stop_reason") or ""
                finish = STOP_REASONS.get(reason, "stop")
            elif kind == "error":
                error = data.get("error") or {}
                yield sse(
                    {
                        "error": {
                            "message": f"Anthropic: {error.get('message', '')}",
                            "type": "api_error",
                            "param": None,
                            "code": "upstream_error",
                        }
                    }
                )
                result.completed = True  # the relay's end: booked as upstream_error
                return
            elif kind == "message_stop":
                yield chunk({}, finish)
                if call.client_wants_usage:
                    yield sse({**base, "choices": [], "usage": openai_usage(call.usage)})
                yield b"data: [DONE]\n\n"
                result.completed = True
