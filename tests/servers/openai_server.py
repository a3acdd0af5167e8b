"""A local OpenAI Chat Completions API (and DeepSeek's OpenAI-compatible one), written
from the public API references, for tests and benchmarks.

OpenAI (``flavor="openai"``): ``POST /v1/chat/completions`` with ``Authorization: Bearer``
(401 ``invalid_api_key`` otherwise); errors ``{"error": {"message", "type", "param",
"code"}}``; automatic prompt caching of prompts of 1,024 tokens or more, in 128-token
increments of the longest prefix an earlier request of the same key (and
``prompt_cache_key``) sent, reported as ``prompt_tokens_details.cached_tokens``;
reasoning models (``gpt-5*``) think ``reasoning_effort`` minimal 0 / low 16 / medium 64 /
high 256 tokens, inside ``completion_tokens`` and reported as
``completion_tokens_details.reasoning_tokens``; ``gpt-4o-audio-preview`` takes
``input_audio`` parts (audio tokens: base64 characters / 4) and with ``modalities``
``["text", "audio"]`` answers audio tokens (twice the text tokens), in
``prompt_tokens_details.audio_tokens`` / ``completion_tokens_details.audio_tokens``.
Streaming: chunks with the role first, content deltas, a final chunk with
``finish_reason``, and with ``stream_options.include_usage`` a last chunk with
``choices: []`` and the usage (every earlier chunk carries ``"usage": null``), then
``data: [DONE]``. ``x-ratelimit-*`` headers; 429 ``rate_limit_exceeded`` with
``retry-after`` (and the ``x-ratelimit-*`` headers) over a set requests-per-minute limit.
Generation takes time: ``stream_delay`` seconds before each content chunk (0 by
default), and ``generated`` keeps each stream's completion tokens produced before it
ended, however it ended (reasoning included: it comes before the first content chunk).

DeepSeek (``flavor="deepseek"``, ``POST /chat/completions``): context caching on disk for
every prompt, in 64-token units, reported as ``prompt_cache_hit_tokens`` and
``prompt_cache_miss_tokens`` (their sum is ``prompt_tokens``); ``deepseek-reasoner``
returns ``reasoning_content`` (32 tokens, in ``completion_tokens``).

Tokens: ``tests.servers.common``; a message is its text's tokens (no per-message
overhead); the reply as the Anthropic server's ("reply with N tokens", default 4).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.servers.common import OUTPUT_TOKEN, Clock, canonical, sse

OPENAI_MODELS = {"gpt-5", "gpt-5-mini", "gpt-4o", "gpt-4o-mini", "gpt-4o-audio-preview"}
DEEPSEEK_MODELS = {"deepseek-chat", "deepseek-reasoner"}
REASONING = {"minimal": 0, "low": 16, "medium": 64, "high": 256}
_REPLY = re.compile(r"reply with (\d+) tokens")


@dataclass
class OpenAIServer:
    flavor: str = "openai"
    api_keys: set[str] = field(default_factory=lambda: {"sk-test-openai-key"})
    requests_per_minute: int | None = None
    clock: Clock = field(default_factory=Clock)
    # (key, prompt_cache_key, prefix digest of n units) → expiry
    cache: dict[tuple[str, str, str], float] = field(default_factory=dict)
    received: list[dict[str, Any]] = field(default_factory=list)
    cut_after: int | None = None  # drop the next stream after this many content chunks
    stream_delay: float = 0.0
    generated: list[int] = field(default_factory=list)
    _minute: list[float] = field(default_factory=list)

    def reset(self) -> None:
        """Back to a freshly started server: no cache, no history, its clock at wall time."""
        self.cache.clear()
        self.received.clear()
        self.cut_after = None
        self.generated.clear()
        self.stream_delay = 0.0
        self._minute.clear()
        self.clock.offset = 0.0

    @property
    def unit(self) -> int:
        return 128 if self.flavor == "openai" else 64

    @property
    def app(self) -> Starlette:
        path = "/v1/chat/completions" if self.flavor == "openai" else "/chat/completions"
        return Starlette(routes=[Route(path, self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        key = auth.removeprefix("Bearer ")
        if not auth.startswith("Bearer ") or key not in self.api_keys:
            return _error(
                401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
            )
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(
                400,
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
                None,
            )
        self.received.append({"body": body, "authorization": auth})
        now = self.clock.now()
        self._minute = [t for t in self._minute if t > now - 60]
        if self.requests_per_minute is not None and len(self._minute) >= self.requests_per_minute:
            return _error(
                429,
                "Rate limit reached for requests.",
                "requests",
                "rate_limit_exceeded",
                headers={**self._limits(), "retry-after": "3"},
            )
        self._minute.append(now)
        models = OPENAI_MODELS if self.flavor == "openai" else DEEPSEEK_MODELS
        model = body.get("model")
        if model not in models:
            return _error(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                "invalid_request_error",
                "model_not_found",
            )
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return _error(
                400,
                "'messages' must be a non-empty array.",
                "invalid_request_error",
                None,
                param="messages",
            )
        if body.get("stream_options") is not None and not body.get("stream"):
            return _error(
                400,
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "invalid_request_error",
                None,
                param="stream_options",
            )
        units, audio_in = _prompt_units(body)
        cached = self._cached(key, str(body.get("prompt_cache_key") or ""), units, now)
        n = int(body.get("n") or 1)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        text, wanted = _reply_count(body)
        reasoning = 0
        if self.flavor == "openai" and model.startswith("gpt-5"):
            reasoning = REASONING.get(body.get("reasoning_effort") or "medium", 64)
        if model == "deepseek-reasoner":
            reasoning = 32
        # The limit covers the reasoning too (max_completion_tokens; DeepSeek's max_tokens).
        reasoning = min(reasoning, limit) if limit else reasoning
        count = min(wanted, limit - reasoning) if limit else wanted
        finish = "length" if count < wanted else "stop"
        audio_out = 2 * count if "audio" in (body.get("modalities") or []) else 0
        completion = (count + reasoning + audio_out) * n
        prompt = len(units)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": audio_in},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning * n,
                "audio_tokens": audio_out * n,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        if self.flavor == "deepseek":
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
                "prompt_cache_hit_tokens": cached,
                "prompt_cache_miss_tokens": prompt - cached,
            }
            if reasoning:
                usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        headers = self._limits()
        created = int(time.time())
        if not body.get("stream"):
            choices = []
            for i in range(n):
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": OUTPUT_TOKEN * count,
                    "refusal": None,
                }
                if model == "deepseek-reasoner":
                    message["reasoning_content"] = OUTPUT_TOKEN * reasoning
                choices.append(
                    {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
                )
            return JSONResponse(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": choices,
                    "usage": usage,
                    "system_fingerprint": "fp_local",
                },
                headers=headers,
            )
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            self._stream(rid, created, model, count, finish, usage, wants_usage, reasoning * n),
            media_type="text/event-stream",
            headers=headers,
        )

    async def _stream(self, rid, created, model, count, finish, usage, wants_usage, reasoning):
        produced = reasoning  # thought before the first content chunk
        try:
            async for event in self._events(rid, created, model, count, finish, usage, wants_usage):
                if event is None:
                    await asyncio.sleep(self.stream_delay)
                    produced += 1
                else:
                    yield event
        finally:
            self.generated.append(produced)

    async def _events(self, rid, created, model, count, finish, usage, wants_usage):
        """The stream's chunks; ``None`` before each content chunk (a token generated)."""
        cut, self.cut_after = self.cut_after, None
        base = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_local",
        }
        extra = {"usage": None} if wants_usage else {}

        def chunk(delta, reason=None):
            return sse(
                {
                    **base,
                    "choices": [
                        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
                    ],
                    **extra,
                }
            )

        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for i in range(count):
            if cut is not None and i == cut:
                raise ConnectionResetError("the local server drops the stream")
            yield None
            yield chunk({"content": OUTPUT_TOKEN})
        yield chunk({}, finish)
        if wants_usage:
            yield sse({**base, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"

    def _cached(self, key: str, family: str, units: list[str], now: float) -> int:
        """The cached prefix (whole units) and this prompt's prefixes stored."""
        minimum = 1024 if self.flavor == "openai" else 0
        digests = []
        chain = hashlib.sha256()
        for start in range(0, len(units) - len(units) % self.unit, self.unit):
            chain.update("".join(units[start : start + self.unit]).encode())
            digests.append(chain.copy().hexdigest())
        hit = 0
        for n, digest in enumerate(digests, start=1):
            if self.cache.get((key, family, digest), 0) > now:
                hit = n * self.unit
            else:
                break
        if len(units) >= minimum:
            for digest in digests:
                self.cache[(key, family, digest)] = now + 600
        return hit if hit >= minimum and len(units) >= minimum else 0

    def _limits(self) -> dict[str, str]:
        limit = 10000 if self.requests_per_minute is None else self.requests_per_minute
        return {
            "x-request-id": f"req_{uuid.uuid4().hex[:24]}",
            "x-ratelimit-limit-requests": str(limit),
            "x-ratelimit-remaining-requests": str(max(limit - len(self._minute), 0)),
            "x-ratelimit-reset-requests": "6ms",
            "x-ratelimit-limit-tokens": "2000000",
            "x-ratelimit-remaining-tokens": "2000000",
            "x-ratelimit-reset-tokens": "0s",
        }


def _prompt_units(body: dict[str, Any]) -> tuple[list[str], int]:
    """The prompt as a list of token-sized units (4 characters each), and its audio."""
    units: list[str] = []
    audio = 0

    def text(value: str) -> None:
        units.extend(value[i : i + 4] for i in range(0, len(value), 4))

    for tool in body.get("tools") or []:
        text(canonical(tool))
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            text(content)
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "text":
                text(part.get("text") or "")
            elif part.get("type") == "input_audio":
                tokens = math.ceil(len((part.get("input_audio") or {}).get("data", "")) / 4)
                units.extend(f"<audio{i}>" for i in range(tokens))
                audio += tokens
        for call in message.get("tool_calls") or []:
            text(canonical(call))
    return units, audio


def _reply_count(body: dict[str, Any]) -> tuple[str, int]:
    last = body["messages"][-1].get("content")
    text = (
        last
        if isinstance(last, str)
        else " ".join(p.get("text", "") for p in last or [] if isinstance(p, dict))
    )
    found = _REPLY.search(text or "")
    return text or "", int(found.group(1)) if found else 4


def _error(status, message, kind, code, *, param=None, headers=None):
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}},
        status_code=status,
        headers=headers,
    )
