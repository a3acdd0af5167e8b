"""Anthropic Messages shapes: an OpenAI chat body → a Messages body, a Messages answer
(whole or streamed) → OpenAI's, and Anthropic's usage → the gateway's :class:`Usage`.

Usage (Messages API reference): ``input_tokens`` excludes the cache, so the prompt is
``input_tokens + cache_creation_input_tokens + cache_read_input_tokens``; the creation
splits into ``cache_creation.ephemeral_5m_input_tokens`` and ``ephemeral_1h_input_tokens``
(without the split, every write is a 5-minute one, the default TTL). A stream reports
the input side in ``message_start`` and the cumulative output in ``message_delta``.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.adapters.base import Usage, refuse
from gateway.errors import GatewayError

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}
USAGE_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def usage_merge(seen: dict[str, Any], raw: dict[str, Any] | None, usage: Usage) -> None:
    """Fold one usage object (``message_start``'s, ``message_delta``'s, a body's) into
    ``seen`` (later non-null fields win: message_delta's counts are cumulative) and set
    ``usage`` from the result."""
    for name, value in (raw or {}).items():
        if value is not None:
            seen[name] = value
    created = int(seen.get("cache_creation_input_tokens") or 0)
    split = seen.get("cache_creation") or {}
    hour = int(split.get("ephemeral_1h_input_tokens") or 0) if isinstance(split, dict) else 0
    usage.prompt_tokens = sum(int(seen.get(name) or 0) for name in USAGE_FIELDS)
    usage.cached_tokens = int(seen.get("cache_read_input_tokens") or 0)
    usage.cache_write_1h_tokens = min(hour, created)
    usage.cache_write_5m_tokens = created - usage.cache_write_1h_tokens
    usage.output_tokens = int(seen.get("output_tokens") or 0)
    usage.reported = True


def openai_usage(usage: Usage) -> dict[str, Any]:
    """The usage object of an OpenAI answer (the cache writes named as Anthropic does)."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.prompt_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "cache_creation_input_tokens": usage.cache_write_5m_tokens + usage.cache_write_1h_tokens,
    }


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """OpenAI content (a string or text parts) as Anthropic text blocks; a part's own
    ``cache_control`` is kept (a client's breakpoint)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for j, part in enumerate(content):
        if part.get("type") != "text":
            raise refuse(f"{where}.content[{j}].type={part.get('type')}", "Anthropic")
        block: dict[str, Any] = {"type": "text", "text": part["text"]}
        if "cache_control" in part:
            block["cache_control"] = part["cache_control"]
        blocks.append(block)
    return blocks


def _tool_use(call: dict[str, Any], where: str) -> dict[str, Any]:
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        raise GatewayError(
            400, "invalid_request", f"{where}.function.arguments must be JSON.", param="messages"
        ) from None
    return {
        "type": "tool_use",
        "id": call.get("id", ""),
        "name": function.get("name", ""),
        "input": arguments,
    }


def messages_from_chat(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """(messages, system blocks): roles alternate (consecutive turns of one role are
    merged, as Anthropic requires), tool results are user turns."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for i, message in enumerate(body["messages"]):
        role, where = message["role"], f"messages[{i}]"
        if role in ("system", "developer"):
            system.extend(_blocks(message.get("content"), where))
        elif role == "user":
            add("user", _blocks(message.get("content"), where))
        elif role == "assistant":
            blocks = _blocks(message.get("content"), where)
            for j, call in enumerate(message.get("tool_calls") or []):
                blocks.append(_tool_use(call, f"{where}.tool_calls[{j}]"))
            add("assistant", blocks)
        elif role == "tool":
            text = "".join(b["text"] for b in _blocks(message.get("content"), where))
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.get("tool_call_id", ""),
                        "content": text,
                    }
                ],
            )
        else:
            raise refuse(f"{where}.role={role}", "Anthropic")
    return messages, system


def tools_from_chat(body: dict[str, Any]) -> dict[str, Any]:
    """``tools`` and ``tool_choice`` in Anthropic's form (empty when none are given)."""
    out: dict[str, Any] = {}
    if body.get("tools"):
        tools = []
        for i, tool in enumerate(body["tools"]):
            function = tool.get("function") if isinstance(tool, dict) else None
            if tool.get("type") != "function" or not isinstance(function, dict):
                raise refuse(f"tools[{i}].type", "Anthropic", "only function tools")
            made: dict[str, Any] = {
                "name": function.get("name", ""),
                "input_schema": function.get("parameters") or {"type": "object"},
            }
            if function.get("description"):
                made["description"] = function["description"]
            if "cache_control" in tool:
                made["cache_control"] = tool["cache_control"]
            tools.append(made)
        out["tools"] = tools
    choice = body.get("tool_choice")
    made_choice: dict[str, Any] | None = None
    if choice in ("auto", "none"):
        made_choice = {"type": choice}
    elif choice == "required":
        made_choice = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        made_choice = {"type": "tool", "name": choice["function"].get("name", "")}
    elif choice is not None:
        raise GatewayError(400, "invalid_request", "Unknown 'tool_choice'.", param="tool_choice")
    if body.get("parallel_tool_calls") is False:
        made_choice = {**(made_choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if made_choice is not None:
        out["tool_choice"] = made_choice
    return out


def chat_body(
    answer: dict[str, Any], *, rid: str, created: int, model: str, usage: Usage
) -> dict[str, Any]:
    """A whole Messages answer as an OpenAI chat completion."""
    text, calls = [], []
    for block in answer.get("content") or []:
        if block.get("type") == "text":
            text.append(block.get("text", ""))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {
                        "name": block.get("name", ""),
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": STOP_REASONS.get(answer.get("stop_reason") or "", "stop"),
                "logprobs": None,
            }
        ],
        "usage": openai_usage(usage),
    }
