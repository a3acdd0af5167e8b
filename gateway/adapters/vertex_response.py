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
    """One candidate's text, tool calls and OpenAI finish reason; thought parts are skipped."""
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


def usage_from_metadata(usage: Usage, meta: Any) -> None:
    """Copy Vertex's usage metadata into ``usage``: tool-use prompt and thoughts included."""
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
