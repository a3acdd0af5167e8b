"""The provider adapter interface: what the pipeline needs from an upstream, nothing more.

An adapter (1) checks the OpenAI parameters against what its provider honours and builds
the upstream request (``prepare``), (2) picks where to send it (``route``), (3) sends it
and relays the answer, filling in :class:`Usage` as it goes (``send``). Budgets, rate
limits, fair share, metering and error shapes are the pipeline's (``gateway.pipeline``):
adding an Anthropic or OpenAI upstream is one new module here and one line in
``gateway.adapters.registry``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.directory import CacheView
from gateway.errors import GatewayError
from gateway.identity import Identity

#: Bytes per token can be below one only for tokens spanning several bytes, never above:
#: every token covers at least one UTF-8 byte, so the byte length of the JSON that carries
#: the prompt (quotes and keys included, which pays for a chat template's role tokens)
#: is an upper bound of its token count without a tokenizer.
CHARS_PER_TOKEN_ESTIMATE = 4


@dataclass
class Usage:
    """Token counts of one request, as the provider reports (or the relay counted) them."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_5m_tokens: int = 0  # of prompt_tokens: written to a 5-minute cache entry
    cache_write_1h_tokens: int = 0  # of prompt_tokens: written to a 1-hour cache entry
    output_tokens: int = 0
    reasoning_tokens: int = 0
    audio_prompt_tokens: int = 0  # of prompt_tokens (cached or not)
    audio_cached_tokens: int = 0  # of cached_tokens
    audio_output_tokens: int = 0  # of output_tokens
    reported: bool = False  # the provider's own figures (not a count of what was streamed)


@dataclass
class Call:
    """One request on its way through the pipeline."""

    kind: str  # "chat", "completion" or "messages" (Anthropic's inbound shape)
    body: dict[str, Any]
    identity: Identity
    cache: CacheView | None
    request_id: str
    priority: str
    session: str | None
    started: float
    model: str = ""
    stream: bool = False
    client_wants_usage: bool = False
    upstream_body: Any = None  # what the adapter will send
    prompt_tokens_bound: int = 0  # an upper bound (cache included)
    # Of it, the bound of the audio part (``audio_prompt_estimate``): reserved at the audio
    # input rate. Set by the adapters whose inbound carries ``input_audio`` (OpenAI).
    audio_prompt_tokens_bound: int = 0
    max_output_tokens: int = 0  # an upper bound (the model's maximum when not given)
    # No max_tokens and no known model maximum: the cost has no upper bound, refused
    # under a hard budget (``gateway.budget.plan``: 402 ``cost_unbounded``).
    output_unbounded: bool = False
    estimated_tokens: int = 0  # for tokens/minute: prompt characters / 4 + output allowance
    usage: Usage = field(default_factory=Usage)
    ttft_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The ledger key (and budget hold id) the gateway mints; ``request_id`` is the
    # caller's X-Request-Id (tracing only: clients may reuse it).
    ledger_key: str = ""
    started_at: float = 0.0  # wall clock (time.time()) when the request arrived
    # Whether what the relay has seen prices the request should its stream end now. The
    # adapter declares it per request in ``prepare``: False when the provider bills output
    # it never streams (a reasoning model's hidden reasoning, spoken output), and True again
    # once the provider's final usage arrives. A stream that ends while it is False books
    # the reservation as a flagged estimate (``gateway.pipeline._close_stream``).
    cut_cost_known: bool = True


@dataclass
class Target:
    """Where a call goes: the pool (fair share, pricing) and the adapter's own choice."""

    pool: str  # the price pool ("" for per-token providers)
    share_key: str  # the fair-share queue
    capacity: int
    worker: str = ""
    state: Any = None


@dataclass
class Upstream:
    """An answer that started well (status 200): a JSON body, or SSE events to relay."""

    body: bytes | None = None
    events: AsyncIterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    completed: bool = False  # the stream reached its end
    close: Callable[[], Awaitable[None]] | None = None


class Adapter(Protocol):
    provider: str

    def prepare(self, call: Call) -> None:
        """Check parameters (400 ``unsupported_parameter``) and build ``upstream_body``."""

    def pool_before_route(self, call: Call) -> str | None:
        """The price pool when it is known before routing and routing changes nothing
        the price depends on (every candidate in one pool); None otherwise."""

    async def route(self, call: Call) -> Target:
        """Choose where to send (503 ``no_worker`` when nothing can take it)."""

    async def send(self, call: Call, target: Target) -> Upstream:
        """Send; a failure before the first byte raises GatewayError with its real status."""


def refuse(name: str, provider: str, why: str = "") -> GatewayError:
    return GatewayError(
        400,
        "unsupported_parameter",
        f"'{name}' is not supported for {provider} models"
        + (f": {why}" if why else "")
        + ". Remove it or use a model that supports it.",
        param=name,
    )


def check_parameters(body: dict[str, Any], *, allowed: frozenset[str], provider: str) -> None:
    """Refuse every field outside ``allowed`` (never forward or drop what we do not know)."""
    for name in body:
        if name not in allowed:
            raise refuse(name, provider)


def json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def prompt_bound(call: Call, *extra_tokens: int) -> int:
    """An upper bound of the prompt's tokens (see :data:`CHARS_PER_TOKEN_ESTIMATE`)."""
    body = call.body
    carried = body.get("messages") if call.kind == "chat" else body.get("prompt")
    size = json_bytes(carried) + sum(json_bytes(body[k]) for k in ("tools",) if k in body)
    return size + sum(extra_tokens) + 16


def prompt_count(body: dict[str, Any], kind: str) -> int:
    """How many prompts one request runs: a list of strings on ``/v1/completions`` is one
    generation per string (a list of token ids is one prompt); chat is always one."""
    prompt = body.get("prompt")
    if kind == "chat" or not isinstance(prompt, list):
        return 1
    return max(1, len(prompt)) if all(isinstance(p, str) for p in prompt) else 1


def sequences_per_prompt(body: dict[str, Any]) -> int:
    """Sequences generated per prompt: ``n`` choices, or ``best_of`` when larger (vLLM
    generates ``best_of`` candidates and bills every one's decode)."""
    counts = [v for v in (body.get("n"), body.get("best_of")) if isinstance(v, int) and v > 0]
    return max([1, *counts])


def output_bound(body: dict[str, Any], kind: str, *, per_sequence: int) -> int:
    """Every output token the request may generate: per prompt × per choice × the cap of
    one sequence (the reservation must bound what a list of prompts can spend)."""
    return per_sequence * sequences_per_prompt(body) * prompt_count(body, kind)


def audio_prompt_estimate(body: dict[str, Any]) -> int:
    """The audio part of the prompt, should the provider not report it (a cut stream):
    each ``input_audio`` part's base64 characters / 4, rounded up. An upper bound, as the
    rest of the estimate is: a provider bills audio by its length, far fewer tokens than
    that for any encoding (a second of 8 kHz 8-bit PCM is 10,667 base64 characters). It
    is a part of :func:`prompt_estimate` (those characters are inside the messages' JSON)."""
    total = 0
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if not isinstance(part, dict) or part.get("type") != "input_audio":
                continue
            audio = part.get("input_audio")
            data = audio.get("data") if isinstance(audio, dict) else None
            if isinstance(data, str):
                total += -(-len(data) // CHARS_PER_TOKEN_ESTIMATE)
    return total


def prompt_estimate(call: Call) -> int:
    """A realistic prompt size for tokens/minute (what OpenAI's limiter counts)."""
    body = call.body
    carried = body.get("messages") if call.kind == "chat" else body.get("prompt")
    return json_bytes(carried) // CHARS_PER_TOKEN_ESTIMATE + 1
