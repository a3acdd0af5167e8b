"""OpenAI Chat Completions (and OpenAI-compatible upstreams: ``gateway.adapters.deepseek``).

The OpenAI body is sent as the client wrote it, less what the gateway owns: parameters
outside :data:`CHAT_PARAMETERS` are a 400 naming them; a streamed request always asks
the upstream for ``stream_options.include_usage`` (so a stream is booked from the
provider's own count), and the usage chunk is relayed only to a client that asked for
it. The autopilot sets ``prompt_cache_key`` per tenant and prefix family (OpenAI only).

Usage (Chat Completions reference): ``prompt_tokens`` includes
``prompt_tokens_details.cached_tokens`` and ``.audio_tokens``; ``completion_tokens``
includes ``completion_tokens_details.reasoning_tokens`` (billed as output) and
``.audio_tokens`` (billed at the audio output rate). A stream cut off before its usage
chunk books the prompt's estimate (the JSON bytes of its messages and tools / 4, its
``input_audio`` parts' base64 characters / 4 of it as audio, at the audio input rate) and
the characters streamed / 4; when the model reasons unseen (GPT-5) or the request asks for
spoken output, what was streamed does not say what the provider bills, and the request's
reservation is booked instead, flagged as an estimate (``Call.cut_cost_known``).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from gateway import pricing, upstream
from gateway.adapters import autopilot
from gateway.adapters.base import (
    CHARS_PER_TOKEN_ESTIMATE,
    Call,
    Target,
    Upstream,
    Usage,
    audio_prompt_estimate,
    check_parameters,
    json_bytes,
    prompt_bound,
    prompt_estimate,
    refuse,
)
from gateway.adapters.hosted import base_url, hosted_model, hosted_target, post, sse

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
        "n",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "reasoning_effort",
        "modalities",
        "audio",
        "prompt_cache_key",
        "safety_identifier",
        "service_tier",
        "verbosity",
        "metadata",
        "store",
    }
)
_decode = msgspec.json.Decoder().decode


def usage_from_openai(usage: Usage, raw: dict[str, Any] | None) -> None:
    """OpenAI's usage object → the gateway's counts (DeepSeek's cache fields too)."""
    if not raw:
        return
    prompt = raw.get("prompt_tokens_details") or {}
    completion = raw.get("completion_tokens_details") or {}
    usage.prompt_tokens = int(raw.get("prompt_tokens") or 0)
    usage.cached_tokens = int(prompt.get("cached_tokens") or 0)
    if "prompt_cache_hit_tokens" in raw:  # DeepSeek: hit + miss = prompt_tokens
        usage.cached_tokens = int(raw.get("prompt_cache_hit_tokens") or 0)
    usage.audio_prompt_tokens = int(prompt.get("audio_tokens") or 0)
    usage.output_tokens = int(raw.get("completion_tokens") or 0)
    usage.reasoning_tokens = int(completion.get("reasoning_tokens") or 0)
    usage.audio_output_tokens = int(completion.get("audio_tokens") or 0)
    usage.reported = True


class OpenAIAdapter:
    provider = "openai"
    label = "OpenAI"
    sets_prompt_cache_key = True
    parameters = CHAT_PARAMETERS

    def prepare(self, call: Call) -> None:
        if call.kind != "chat":
            raise refuse("prompt", self.label, "use /v1/chat/completions")
        body = call.body
        check_parameters(body, allowed=self.parameters, provider=self.label)
        sent = dict(body)
        if call.stream:
            sent["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        call.upstream_body = sent
        n = body.get("n") or 1
        given = body.get("max_completion_tokens") or body.get("max_tokens")
        call.max_output_tokens = int(given or hosted_model(call).max_output_tokens) * int(n)
        call.prompt_tokens_bound = prompt_bound(call)
        call.audio_prompt_tokens_bound = audio_prompt_estimate(body)
        call.estimated_tokens = prompt_estimate(call) + call.max_output_tokens
        # Hidden reasoning and audio output are billed but not streamed as text: a cut
        # stream's cost is then unknown until the provider's usage (which a cut loses).
        call.cut_cost_known = not (
            hosted_model(call).hidden_reasoning or pricing.output_may_be_audio(body)
        )

    def pool_before_route(self, call: Call) -> str | None:
        return ""

    async def route(self, call: Call) -> Target:
        target = await hosted_target(call, self.provider)
        if self.sets_prompt_cache_key and target.state.cache_autopilot:
            decision = autopilot.prompt_cache_key(
                tenant_id=call.identity.tenant_id, body=call.upstream_body
            )
            if decision:
                call.extra["autopilot"] = decision
        return target

    def url(self) -> str:
        return f"{base_url(self.provider)}/chat/completions"

    async def send(self, call: Call, target: Target) -> Upstream:
        response = await post(
            self.provider,
            self.url(),
            call.upstream_body,
            {"Authorization": f"Bearer {target.state.secret}"},
        )
        headers = {}
        if "x-request-id" in response.headers:
            headers["x-upstream-request-id"] = response.headers["x-request-id"]
        if call.extra.get("autopilot"):
            headers["x-cacheplane-autopilot"] = call.extra["autopilot"]
        if not call.stream:
            try:
                raw = await response.aread()
            finally:
                await response.aclose()
            usage_from_openai(call.usage, _decode(raw).get("usage"))
            return Upstream(body=raw, headers=headers)
        result = Upstream(headers=headers, close=response.aclose)
        result.events = self._relay(call, response, result)
        return result

    async def _relay(
        self, call: Call, response: upstream.Response, result: Upstream
    ) -> AsyncIterator[bytes]:
        chars = 0
        # Until the usage chunk: the prompt as estimated (the provider processed it),
        # its tool definitions included (the provider bills them as prompt).
        tools = json_bytes(call.body["tools"]) if call.body.get("tools") else 0
        call.usage.prompt_tokens = prompt_estimate(call) + tools // CHARS_PER_TOKEN_ESTIMATE
        # Its audio part at the audio input rate, as the usage chunk would report it.
        call.usage.audio_prompt_tokens = call.audio_prompt_tokens_bound
        events = upstream.sse_events(response)
        while True:
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
            except Exception as exc:  # the provider's connection broke mid-stream
                call.extra["status"] = "upstream_error"
                error = {"message": f"{self.label}: {exc}", "type": "api_error"}
                yield sse({"error": {**error, "param": None, "code": "upstream_error"}})
                result.completed = True  # the relay's end: booked as upstream_error
                return
            data = upstream.parse_sse_event(event)
            if data is None:
                if b"[DONE]" in event:
                    yield event
                    result.completed = True
                continue
            if "error" in data:
                call.extra["status"] = "upstream_error"
                yield sse(data)
                result.completed = True
                return
            for choice in data.get("choices") or []:
                delta = choice.get("delta") or {}
                chars += len(delta.get("content") or "") + len(delta.get("reasoning_content") or "")
                for tool in delta.get("tool_calls") or []:
                    chars += len((tool.get("function") or {}).get("arguments") or "")
            if call.ttft_ms is None and data.get("choices"):
                call.ttft_ms = int((time.perf_counter() - call.started) * 1000)
            if data.get("usage"):
                usage_from_openai(call.usage, data["usage"])
                call.cut_cost_known = True  # the provider's own count, reasoning included
                if not data.get("choices") and not call.client_wants_usage:
                    continue  # the client did not ask for it
            elif not call.usage.reported:
                call.usage.output_tokens = math.ceil(chars / CHARS_PER_TOKEN_ESTIMATE)
            yield event
