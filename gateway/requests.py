"""Reading and checking an OpenAI-style request body (no I/O beyond the body itself)."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from starlette.requests import Request

from controlplane.strict_json import StrictJsonError, loads_strict
from gateway.errors import GatewayError

#: Request bodies nest a few levels (messages → content parts → tool schemas); JSON
#: schemas of tools may go deeper, but not this deep.
MAX_DEPTH = 32


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, "payload_too_large", f"Request body exceeds {limit} bytes.")


async def read_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object, read at most ``CACHEPLANE_GATEWAY_MAX_BODY_BYTES`` far
    (a chunked body is cut off as it arrives, not after it was all buffered)."""
    limit = settings.CACHEPLANE_GATEWAY_MAX_BODY_BYTES
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    try:
        body = loads_strict(b"".join(chunks), max_depth=MAX_DEPTH)
    except StrictJsonError as exc:
        raise GatewayError(400, "malformed_json", exc.message) from None
    if not isinstance(body, dict):
        raise GatewayError(400, "malformed_json", "The request body must be a JSON object.")
    return body


def _invalid(message: str, param: str) -> GatewayError:
    return GatewayError(400, "invalid_request", message, param=param)


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty list.", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _invalid(f"messages[{i}] must be an object with a string 'role'.", "messages")
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise _invalid(
                f"messages[{i}].content must be a string or a list of parts.", "messages"
            )
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _invalid(
                    f"messages[{i}].content[{j}] must be an object with a 'type'.", "messages"
                )
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise _invalid(f"messages[{i}].content[{j}].text must be a string.", "messages")


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if not isinstance(prompt, list) or not prompt:
        raise _invalid("'prompt' must be a string or a non-empty list.", "prompt")
    strings = all(isinstance(p, str) for p in prompt)
    tokens = all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
    if not (strings or tokens):
        raise _invalid("'prompt' must be a string, a list of strings or of token ids.", "prompt")


def validate_body(body: dict[str, Any], kind: str) -> None:
    """Shape checks every provider shares (each adapter then checks its own parameters)."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _invalid("'model' is required.", "model")
    if "cache_salt" in body:
        raise GatewayError(
            400,
            "cache_salt_not_allowed",
            "cache_salt is set by the gateway from your tenant; do not send it.",
            param="cache_salt",
        )
    for name in ("max_tokens", "max_completion_tokens", "n"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _invalid(f"'{name}' must be a positive integer.", name)
        if name != "n" and value > settings.CACHEPLANE_GATEWAY_MAX_TOKENS:
            raise GatewayError(
                400,
                "max_tokens_too_large",
                f"'{name}' may be at most {settings.CACHEPLANE_GATEWAY_MAX_TOKENS}.",
                param=name,
            )
    if isinstance(body.get("n"), int) and body["n"] > 16:
        raise _invalid("'n' may be at most 16.", "n")
    if kind == "messages":  # Anthropic's shape: only Anthropic models take it
        from gateway.adapters.hosted import HOSTED_MODELS

        found = HOSTED_MODELS.get(body["model"])
        if found is None or found.provider != "anthropic":
            raise GatewayError(
                404,
                "model_not_found",
                f"/v1/messages serves Anthropic models; {body['model']!r} is not one.",
                param="model",
            )
        _check_messages(body.get("messages"))
    elif kind == "chat":
        _check_messages(body.get("messages"))
    elif "prompt" not in body:
        raise _invalid("'prompt' is required.", "prompt")
    else:
        _check_prompt(body["prompt"])
    if "stream" in body and not isinstance(body["stream"], bool):
        raise _invalid("'stream' must be a boolean.", "stream")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise _invalid("'stream_options' must be an object.", "stream_options")
    if body.get("stream_options") is not None and not body.get("stream"):
        # OpenAI refuses it too: the options would silently do nothing.
        raise GatewayError(
            400,
            "stream_options_without_stream",
            "'stream_options' is only allowed when 'stream' is true.",
            param="stream_options",
        )
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _invalid(f"'{name}' must be a number.", name)


def prompt_text(body: dict[str, Any], kind: str) -> str:
    """The prompt as text, for routing keys (no tokenizer needed)."""
    if kind == "completion":
        prompt = body["prompt"]
        return prompt if isinstance(prompt, str) else json.dumps(prompt)
    parts = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if p.get("type") == "text")
        parts.append(f"{message.get('role', '')}:{content or ''}\n")
    return "".join(parts)
