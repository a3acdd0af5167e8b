"""A local Anthropic Messages API, written from Anthropic's public API reference, for
tests and benchmarks (driven through the gateway by the official ``anthropic`` SDK).

What it implements as the reference describes it:

- ``POST /v1/messages`` with ``x-api-key`` (401 ``authentication_error`` otherwise) and
  ``anthropic-version`` (400 without it); unknown models are 404 ``not_found_error``;
  errors are ``{"type": "error", "error": {"type", "message"}, "request_id"}``.
- Prompt caching: ``cache_control: {"type": "ephemeral", "ttl": "5m" | "1h"}`` on tool
  definitions, system blocks and message content blocks (a top-level ``cache_control``
  marks the last block); at most 4 (400 beyond); a 1-hour breakpoint may not follow a
  5-minute one (400); a prefix below the model's minimum (1,024 tokens for Sonnet 4.5,
  4,096 for Haiku 4.5) is not cached and raises nothing; the prompt is hashed in order
  tools → system → messages; at each breakpoint the longest live entry at that position or
  up to 20 blocks before it is read; reads refresh an entry's TTL; each segment written
  is billed at the TTL of the breakpoint that ends it (``cache_creation``'s 5m/1h split).
- Usage: ``input_tokens`` (after the last cached position), ``cache_creation_input_tokens``,
  ``cache_read_input_tokens``, ``cache_creation.ephemeral_{5m,1h}_input_tokens``,
  ``output_tokens``.
- Streaming event order: ``message_start`` (input-side usage, ``output_tokens`` 1),
  ``content_block_start``, ``ping``, ``content_block_delta``…, ``content_block_stop``,
  ``message_delta`` (``stop_reason``, cumulative ``output_tokens``), ``message_stop``;
  a mid-stream failure is an ``error`` event.
- Rate-limit headers ``anthropic-ratelimit-requests-*`` / ``-tokens-*``; over a set
  requests-per-minute limit, 429 ``rate_limit_error`` with ``retry-after``.
- Generation takes time: ``stream_delay`` seconds before each delta (0 by default), and
  ``generated`` keeps each stream's output tokens produced before it ended, however it
  ended (what Anthropic bills a stream its client closed).

Tokens: ``tests.servers.common``. The reply is ``"tok "`` × N (N from "reply with N
tokens" in the last user text, else 4), capped by ``max_tokens`` (``stop_reason``
``max_tokens``); with tools and ``tool_choice`` any/tool, a ``tool_use`` block.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.servers.common import OUTPUT_TOKEN, Clock, block_tokens, canonical, sse

MIN_CACHE_TOKENS = {
    "claude-sonnet-4-5": 1024,
    "claude-opus-4-1": 1024,
    "claude-haiku-4-5": 4096,
    "claude-opus-4-5": 4096,
}
TTL_SECONDS = {"5m": 300, "1h": 3600}
LOOKBACK = 20
_REPLY = re.compile(r"reply with (\d+) tokens")


@dataclass
class _Position:
    digest: str
    tokens: int  # cumulative, up to and including this block
    control: dict[str, Any] | None


@dataclass
class Fault:
    """The next request's answer: an error status, or a stream cut after ``after``
    deltas (``kind`` "cut": the connection drops; "error_event": an ``error`` event)."""

    kind: str
    status: int = 500
    error_type: str = "api_error"
    message: str = "Internal server error"
    after: int = 0


@dataclass
class AnthropicServer:
    api_keys: set[str] = field(default_factory=lambda: {"sk-ant-test-key"})
    requests_per_minute: int | None = None
    clock: Clock = field(default_factory=Clock)
    cache: dict[tuple[str, str, str], tuple[int, float, str]] = field(default_factory=dict)
    received: list[dict[str, Any]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    stream_delay: float = 0.0
    generated: list[int] = field(default_factory=list)
    _minute: list[float] = field(default_factory=list)

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"])])

    def reset(self) -> None:
        """Back to a freshly started server: no cache, no history, its clock at wall time."""
        self.cache.clear()
        self.received.clear()
        self.faults.clear()
        self.generated.clear()
        self.stream_delay = 0.0
        self._minute.clear()
        self.clock.offset = 0.0

    # -- the endpoint ------------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        key = request.headers.get("x-api-key", "")
        if key not in self.api_keys:
            return _error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return _error(400, "invalid_request_error", "anthropic-version header is required")
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "invalid_request_error", "Request body is not valid JSON")
        self.received.append({"body": body, "x-api-key": key})
        now = self.clock.now()
        self._minute = [t for t in self._minute if t > now - 60]
        if self.requests_per_minute is not None and len(self._minute) >= self.requests_per_minute:
            return _error(
                429,
                "rate_limit_error",
                "Number of requests has exceeded your rate limit",
                headers={"retry-after": "7", **self._limits(0)},
            )
        self._minute.append(now)
        fault = self.faults.pop(0) if self.faults else None
        if fault is not None and fault.kind == "status":
            return _error(fault.status, fault.error_type, fault.message)
        model = body.get("model")
        if model not in MIN_CACHE_TOKENS:
            return _error(404, "not_found_error", f"model: {model}")
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            return _error(400, "invalid_request_error", "max_tokens: Field required")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return _error(
                400, "invalid_request_error", "messages: at least one message is required"
            )
        try:
            positions = _positions(body)
            usage = self._cache_usage(key, model, positions, now)
        except ValueError as exc:
            return _error(400, "invalid_request_error", str(exc))
        content, stop_reason, output = _reply(body)
        usage["output_tokens"] = output
        message_id = f"msg_{uuid.uuid4().hex[:24]}"
        headers = {"request-id": f"req_{uuid.uuid4().hex[:24]}", **self._limits(1)}
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": usage,
                },
                headers=headers,
            )
        return StreamingResponse(
            _stream(message_id, model, content, stop_reason, usage, fault, self),
            media_type="text/event-stream",
            headers=headers,
        )

    def _limits(self, used: int) -> dict[str, str]:
        limit = 4000 if self.requests_per_minute is None else self.requests_per_minute
        reset = "2026-01-01T00:01:00Z"
        return {
            "anthropic-ratelimit-requests-limit": str(limit),
            "anthropic-ratelimit-requests-remaining": str(max(limit - len(self._minute), 0)),
            "anthropic-ratelimit-requests-reset": reset,
            "anthropic-ratelimit-tokens-limit": "400000",
            "anthropic-ratelimit-tokens-remaining": "400000",
            "anthropic-ratelimit-tokens-reset": reset,
        }

    # -- prompt caching ----------------------------------------------------------------

    def _cache_usage(
        self, key: str, model: str, positions: list[_Position], now: float
    ) -> dict[str, Any]:
        breakpoints = [i for i, p in enumerate(positions) if p.control is not None]
        if len(breakpoints) > 4:
            raise ValueError(
                "A maximum of 4 blocks with cache_control may be provided. "
                f"Found {len(breakpoints)}."
            )
        seen_short = False
        for i in breakpoints:
            control = positions[i].control or {}
            if control.get("type") != "ephemeral":
                raise ValueError("cache_control.type: Input should be 'ephemeral'")
            ttl = control.get("ttl", "5m")
            if ttl not in TTL_SECONDS:
                raise ValueError("cache_control.ttl: Input should be '5m' or '1h'")
            if ttl == "1h" and seen_short:
                raise ValueError(
                    "a ttl='1h' cache_control block must not come after a ttl='5m' one"
                )
            seen_short = seen_short or ttl == "5m"
        minimum = MIN_CACHE_TOKENS[model]
        read_at = -1
        for bp in breakpoints:
            for q in range(bp, max(bp - LOOKBACK, 0) - 1, -1):
                entry = self.cache.get((key, model, positions[q].digest))
                if entry is not None and entry[1] > now:
                    if q > read_at:
                        read_at = q
                    break
        if read_at >= 0:
            tokens, _, ttl = self.cache[(key, model, positions[read_at].digest)]
            self.cache[(key, model, positions[read_at].digest)] = (
                tokens,
                now + TTL_SECONDS[ttl],
                ttl,
            )
        written = {"5m": 0, "1h": 0}
        covered = read_at
        for bp in breakpoints:
            if bp <= covered or positions[bp].tokens < minimum:
                continue
            ttl = (positions[bp].control or {}).get("ttl", "5m")
            start = positions[covered].tokens if covered >= 0 else 0
            written[ttl] += positions[bp].tokens - start
            self.cache[(key, model, positions[bp].digest)] = (
                positions[bp].tokens,
                now + TTL_SECONDS[ttl],
                ttl,
            )
            covered = bp
        total = positions[-1].tokens if positions else 0
        cached_to = positions[covered].tokens if covered >= 0 else 0
        read = positions[read_at].tokens if read_at >= 0 else 0
        return {
            "input_tokens": total - cached_to,
            "cache_creation_input_tokens": written["5m"] + written["1h"],
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": written["5m"],
                "ephemeral_1h_input_tokens": written["1h"],
            },
            "service_tier": "standard",
        }


def _positions(body: dict[str, Any]) -> list[_Position]:
    """Every block of the prompt in cache order (tools, system, messages), each with the
    hash of the prefix it ends and the prefix's token count."""
    chain = hashlib.sha256((body.get("model") or "").encode())
    out: list[_Position] = []
    tokens = 0

    def add(block: Any, marker: str = "") -> None:
        nonlocal tokens
        chain.update((marker + canonical(block)).encode())
        tokens += block_tokens(block)
        control = block.get("cache_control") if isinstance(block, dict) else None
        out.append(_Position(chain.copy().hexdigest(), tokens, control))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}] if system else []
    for block in system or []:
        add(block)
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for j, block in enumerate(content or []):
            add(block, marker=message.get("role", "") if j == 0 else "")
    if isinstance(body.get("cache_control"), dict) and out:
        out[-1].control = body["cache_control"]
    return out


def _reply(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str, int]:
    last = body["messages"][-1].get("content")
    text = (
        last
        if isinstance(last, str)
        else " ".join(b.get("text", "") for b in last or [] if isinstance(b, dict))
    )
    found = _REPLY.search(text or "")
    wanted = int(found.group(1)) if found else 4
    count = min(wanted, body["max_tokens"])
    stop = "max_tokens" if count < wanted else "end_turn"
    choice = body.get("tool_choice") or {}
    if body.get("tools") and choice.get("type") in ("any", "tool"):
        name = choice.get("name") or body["tools"][0]["name"]
        tool = {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:20]}",
            "name": name,
            "input": {"q": "tok"},
        }
        return [tool], "tool_use", count
    return [{"type": "text", "text": OUTPUT_TOKEN * count}], stop, count


async def _stream(message_id, model, content, stop_reason, usage, fault, server):
    produced = 0  # text deltas (a token each) generated so far
    try:
        async for event in _events(message_id, model, content, stop_reason, usage, fault):
            if event is None:
                await asyncio.sleep(server.stream_delay)
                produced += 1
            else:
                yield event
    finally:
        # At least the one token message_start reports.
        server.generated.append(max(produced, 1))


async def _events(message_id, model, content, stop_reason, usage, fault):
    """The stream's events; ``None`` before each delta (one more token generated)."""
    start_usage = {**usage, "output_tokens": 1}
    yield sse(
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        },
        "message_start",
    )
    block = content[0]
    empty = {"type": "text", "text": ""} if block["type"] == "text" else {**block, "input": {}}
    yield sse(
        {"type": "content_block_start", "index": 0, "content_block": empty}, "content_block_start"
    )
    yield sse({"type": "ping"}, "ping")
    pieces = (
        [OUTPUT_TOKEN] * usage["output_tokens"]
        if block["type"] == "text"
        else [json.dumps(block["input"])]
    )
    for n, piece in enumerate(pieces):
        if fault is not None and fault.kind in ("cut", "error_event") and n == fault.after:
            if fault.kind == "cut":
                raise ConnectionResetError("the local server drops the stream")
            yield sse(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                "error",
            )
            return
        yield None
        delta = (
            {"type": "text_delta", "text": piece}
            if block["type"] == "text"
            else {"type": "input_json_delta", "partial_json": piece}
        )
        yield sse(
            {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"
        )
    yield sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        "message_delta",
    )
    yield sse({"type": "message_stop"}, "message_stop")


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None):
    return JSONResponse(
        {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": f"req_{uuid.uuid4().hex[:24]}",
        },
        status_code=status,
        headers=headers,
    )
