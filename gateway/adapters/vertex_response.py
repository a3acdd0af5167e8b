"""Vertex AI response mapping: google-genai results and errors → OpenAI wire shapes.

A whole ``GenerateContentResponse`` becomes a chat/completions body, a streamed chunk one
candidate's text and tool calls, usage metadata the gateway's ``Usage`` (thinking counted as
output, as Google bills it), and an ``APIError`` a ``GatewayError`` keeping Vertex's status.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.adapters.base import Call, Usage
from gateway.errors import GatewayError

_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
}


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event line, compact JSON as OpenAI sends it."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def candidate_parts(chunk: Any, index: int = 0) -> tuple[str, list[dict[str, Any]], str | None]:
    """One candidate's text, tool calls and OpenAI finish reason; thought parts are skipped.

    A prompt Vertex blocked has no candidates and a ``promptFeedback.blockReason``: that is
    OpenAI's ``content_filter``.
    """
    candidates = getattr(chunk, "candidates", None) or []
    if len(candidates) <= index:
        feedback = getattr(chunk, "prompt_feedback", None)
        blocked = feedback is not None and getattr(feedback, "block_reason", None) is not None
        return "", [], "content_filter" if blocked else None
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


def completion_body(call: Call, result: Any, rid: str, created: int) -> dict[str, Any]:
    """A whole (non-streamed) result as an OpenAI chat.completion or text_completion body."""
    choices = []
    count = max(1, len(getattr(result, "candidates", None) or []))
    for index in range(count):
        text, tool_calls, reason = candidate_parts(result, index)
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
        "usage": openai_usage(call.usage),
    }


def _audio_tokens(details: Any) -> int:
    """The AUDIO entries of a ``…TokensDetails`` list (``ModalityTokenCount`` objects)."""
    total = 0
    for entry in details or []:
        modality = getattr(entry, "modality", None)
        name = getattr(modality, "name", str(modality)).rsplit(".", 1)[-1]
        if name == "AUDIO":
            total += int(getattr(entry, "token_count", 0) or 0)
    return total


def usage_from_metadata(usage: Usage, meta: Any) -> None:
    """Copy Vertex's usage metadata into ``usage``: tool-use prompt and thoughts included,
    and the audio part of the prompt, of the cached tokens and of the output by modality
    (``promptTokensDetails`` / ``cacheTokensDetails`` / ``candidatesTokensDetails``), which
    the price book prices at the model's audio rates."""
    if meta is None:
        return
    prompt = int(getattr(meta, "prompt_token_count", 0) or 0)
    prompt += int(getattr(meta, "tool_use_prompt_token_count", 0) or 0)
    thoughts = int(getattr(meta, "thoughts_token_count", 0) or 0)
    usage.prompt_tokens = prompt
    usage.cached_tokens = min(prompt, int(getattr(meta, "cached_content_token_count", 0) or 0))
    usage.output_tokens = int(getattr(meta, "candidates_token_count", 0) or 0) + thoughts
    usage.reasoning_tokens = thoughts
    # Clamped so the split stays consistent (audio within the prompt, cached audio within
    # the cached reads, uncached audio within the uncached prompt) whatever is reported.
    cached_audio = _audio_tokens(getattr(meta, "cache_tokens_details", None))
    usage.audio_cached_tokens = min(usage.cached_tokens, cached_audio)
    usage.audio_prompt_tokens = min(
        _audio_tokens(getattr(meta, "prompt_tokens_details", None)),
        usage.audio_cached_tokens + prompt - usage.cached_tokens,
    )
    usage.audio_cached_tokens = min(usage.audio_cached_tokens, usage.audio_prompt_tokens)
    usage.audio_output_tokens = min(
        usage.output_tokens, _audio_tokens(getattr(meta, "candidates_tokens_details", None))
    )
    usage.reported = True


def openai_usage(usage: Usage) -> dict[str, Any]:
    """The OpenAI ``usage`` object; details only where there is something to report."""
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
    """A Vertex failure in the gateway's shape: its status kept, Retry-After passed on.

    No answer in time is 504 ``upstream_timeout`` (aiohttp's timeout has no text at all);
    any other transport failure a 502 naming its kind.
    """
    from django.conf import settings
    from google.genai import errors

    from caches.providers.vertex import timeout_error_types

    if isinstance(exc, timeout_error_types()):
        seconds = settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS
        return GatewayError(
            504, "upstream_timeout", f"Vertex AI did not answer within {seconds:g} s."
        )
    if not isinstance(exc, errors.APIError):
        detail = str(exc) or "no detail"
        return GatewayError(
            502, "upstream_error", f"Vertex AI unreachable: {type(exc).__name__}: {detail}"
        )
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
