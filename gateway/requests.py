"""Reading and checking an OpenAI-style request body (no I/O beyond the body itself)."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from starlette.requests import Request

from gateway.errors import GatewayError


async def read_body(request: Request) -> dict[str, Any]:
    limit = settings.CACHEPLANE_GATEWAY_MAX_BODY_BYTES
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise GatewayError(413, "payload_too_large", f"Request body exceeds {limit} bytes.")
    raw = await request.body()
    if len(raw) > limit:
        raise GatewayError(413, "payload_too_large", f"Request body exceeds {limit} bytes.")
    try:
        body = json.loads(raw)
    except ValueError:
        raise GatewayError(400, "malformed_json", "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise GatewayError(400, "malformed_json", "The request body must be a JSON object.")
    return body


def validate_body(body: dict[str, Any], kind: str) -> None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise GatewayError(400, "invalid_request", "'model' is required.", param="model")
    if "cache_salt" in body:
        raise GatewayError(
            400,
            "cache_salt_not_allowed",
            "cache_salt is set by the gateway from your tenant; do not send it.",
            param="cache_salt",
        )
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise GatewayError(
                400, "invalid_request", f"'{name}' must be a positive integer.", param=name
            )
        if value > settings.CACHEPLANE_GATEWAY_MAX_TOKENS:
            raise GatewayError(
                400,
                "max_tokens_too_large",
                f"'{name}' may be at most {settings.CACHEPLANE_GATEWAY_MAX_TOKENS}.",
                param=name,
            )
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise GatewayError(
                400, "invalid_request", "'messages' must be a non-empty list.", param="messages"
            )
    elif not isinstance(body.get("prompt"), str | list):
        raise GatewayError(400, "invalid_request", "'prompt' is required.", param="prompt")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise GatewayError(400, "invalid_request", "'stream' must be a boolean.", param="stream")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise GatewayError(
            400, "invalid_request", "'stream_options' must be an object.", param="stream_options"
        )
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise GatewayError(400, "invalid_request", f"'{name}' must be a number.", param=name)


def max_tokens(body: dict[str, Any]) -> int:
    return int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)


def prompt_text(body: dict[str, Any], kind: str) -> str:
    """The prompt as text, for routing keys and token estimates (no tokenizer needed)."""
    if kind == "completion":
        prompt = body["prompt"]
        return prompt if isinstance(prompt, str) else json.dumps(prompt)
    parts = []
    for message in body["messages"]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(
            f"{message.get('role', '')}:{content or ''}\n" if isinstance(message, dict) else ""
        )
    return "".join(parts)
