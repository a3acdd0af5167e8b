"""One request, top to bottom: authenticate → authorize → route → price → rate-limit +
reserve (one atomic step, ``gateway.limits``) → fair share → send → meter/settle.

Every step runs once, here, for every provider; what differs per provider (the upstream
request, where it goes, how its answer and usage look) is an adapter
(``gateway.adapters``). A step that refuses raises ``GatewayError`` (OpenAI's error
shape, a stable ``code``); everything taken before it (a rate-limit slot, a fair-share
slot, a budget hold) is given back by ``_Books.close``, which runs exactly once per
request: at the end of the body, at the end (or abort) of a stream, or on the error.

Hot-path cost: no database query in steady state (identity, budgets' periods, rate
limits, prices and the worker directory are cached for seconds); Redis: one script to
admit (rate limits and the hold), one to close (release and settle), both group-committed
across concurrent requests, a shared routing read, one batched push for metering.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from billing.pricing import UsageCounts
from billing.services.budget_reservations import hold_new_id
from controlplane.db import db_sync_to_async
from controlplane.request_context import sanitize_request_id
from gateway import budget, closing, fairshare, limits, pricing, ratelimit
from gateway.adapters.base import Adapter, Call, Target, Upstream
from gateway.adapters.registry import adapter_for
from gateway.cache_reference import resolve_cache
from gateway.errors import GatewayError
from gateway.event_stream import EventStreamResponse
from gateway.identity import Identity, identify, identity_refused
from gateway.metering import Meter
from gateway.requests import read_body, validate_body
from tenants.authentication import scope_source

logger = logging.getLogger(__name__)
PRIORITIES = ("interactive", "batch")


async def handle(request: Request, kind: str) -> Response:
    """Answer one ``/v1/chat/completions``, ``/v1/completions`` or ``/v1/messages`` request."""
    started, started_at = time.perf_counter(), time.time()
    # The caller's id is for tracing only: the ledger key (= hold id) is the gateway's own.
    request_id = sanitize_request_id(request.headers.get("x-request-id"))
    ledger_key = hold_new_id()
    books = _Books()
    try:
        # 1-2. authenticate and authorize (inference.invoke), then parse and check.
        identity = await identify(
            request.headers.get("authorization"), source=scope_source(request.scope)
        )
        call = await _parse(request, kind, identity, request_id, started)
        call.ledger_key, call.started_at = ledger_key, started_at
        adapter = await adapter_for(call.model, call.cache)
        adapter.prepare(call)  # honoured or refused: never silently dropped
        books.open(call, adapter.provider)
        # 3-5. route (where it goes: the pool, hence the price), price the request's
        # upper bound, then rate-limit (key and tenant requests/min, tokens/min,
        # concurrency) and reserve the estimate on every budget that applies, in one
        # atomic step in Redis. When the pool is known before routing (every candidate
        # in one pool), routing and admission are each one round trip: run at once.
        known = adapter.pool_before_route(call)
        if known is None:
            target = books.target = await adapter.route(call)
            await _price_and_admit(books, call, adapter.provider, target.pool)
        else:
            target = books.target = await _route_while_admitting(
                adapter.route(call), _price_and_admit(books, call, adapter.provider, known)
            )
            if target.pool != known:  # the directory changed in between: price again
                await books.give_back()
                await _price_and_admit(books, call, adapter.provider, target.pool)
        # 6. a fair share of the pool when it is saturated.
        admission = books.admission
        assert admission is not None, "admitted above (a refusal raised)"
        books.queue = fairshare.queue_for(target.share_key, target.capacity)
        await books.queue.acquire(
            tenant=identity.tenant_id,
            weight=admission.weight,
            priority=call.priority,
            timeout=_queue_timeout(),
        )
        books.slot = True
        # 7. send through the adapter.
        upstream_started = time.perf_counter()
        books.sent = True
        answer = await adapter.send(call, target)
    except GatewayError as exc:
        # Timed out after sending: the provider may have billed the work; the reservation
        # is booked as a flagged estimate (corrected by ``usage_estimate_correct``).
        timed_out = books.sent and exc.code == "upstream_timeout"
        await books.close(
            status="upstream_timeout" if timed_out else "upstream_error", estimate=timed_out
        )
        response = exc.response()
        response.headers["x-request-id"] = request_id
        response.headers["x-cacheplane-ledger-key"] = ledger_key
        for name, value in books.rate_headers().items():
            response.headers.setdefault(name, value)
        return response
    except RedisError:
        # Budgets and rate limits cannot be checked: refuse rather than run unchecked.
        logger.exception("redis unavailable", extra={"request_id": request_id})
        await books.close(status="upstream_error")
        return GatewayError(
            503,
            "limits_unavailable",
            "Budgets and rate limits cannot be checked right now; retry shortly.",
            headers={"Retry-After": "1", "x-request-id": request_id},
        ).response()
    except BaseException:
        await books.close(status="upstream_error")
        raise
    # 8. meter and settle: now for a body, when the stream ends (or breaks) otherwise.
    headers = {
        "x-request-id": request_id,
        "x-cacheplane-ledger-key": ledger_key,
        "x-cacheplane-overhead-ms": f"{(upstream_started - started) * 1000:.2f}",
        **answer.headers,
        **books.rate_headers(),
    }
    if answer.events is None:
        call.ttft_ms = int((time.perf_counter() - started) * 1000)
        await books.close(status="ok")
        return Response(answer.body, media_type="application/json", headers=headers)
    headers["cache-control"] = "no-cache"
    return EventStreamResponse(
        _relay(answer, books), media_type="text/event-stream", headers=headers
    )


async def _price_and_admit(books: _Books, call: Call, provider: str, pool: str) -> None:
    """Price the call's upper bound for ``pool`` and take its rate limits and budget hold
    (429 or 402 with nothing taken)."""
    books.rates = await pricing.rates(provider, call.model, pool)
    estimate = (
        pricing.upper_bound_micros(
            books.rates,
            prompt_tokens=call.prompt_tokens_bound,
            max_output_tokens=call.max_output_tokens,
        )
        if books.rates is not None
        else None
    )
    identity = call.identity
    books.admission = await ratelimit.plan(
        tenant_id=identity.tenant_id,
        key_id=identity.key_id,
        call_id=call.request_id + ":" + str(id(call)),
        estimated_tokens=call.estimated_tokens,
    )
    hold = await budget.plan(
        identity,
        amount_micros=estimate,
        request_id=call.request_id,
        hold_id=call.ledger_key,
        unbounded=call.output_unbounded,
    )
    await limits.admit(identity, books.admission, hold, request_id=call.request_id)
    books.hold = hold


async def _route_while_admitting(routing: Awaitable[Target], admitting: Awaitable[None]) -> Target:
    """Both steps at once; a routing refusal (503, 429) wins over an admission refusal,
    as when routing ran first (what admission took is given back by the books)."""
    routed, admitted = await asyncio.gather(routing, admitting, return_exceptions=True)
    for outcome in (routed, admitted):
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome  # cancellation and exits
    if isinstance(routed, BaseException):
        raise routed
    if isinstance(admitted, BaseException):
        raise admitted
    return routed


async def _relay(answer: Upstream, books: _Books) -> AsyncIterator[bytes]:
    """The adapter's events to the client; the books close whatever way the stream ends."""
    try:
        assert answer.events is not None, "only a streamed answer is relayed"
        async for event in answer.events:
            yield event
    finally:
        # A client that went away cancels this generator, and Starlette's cancel scope
        # cancels every await here too: the closing runs as its own task, shielded, so
        # the stream is booked from what was streamed even then.
        closing = asyncio.ensure_future(_close_stream(answer, books))
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)
        await asyncio.shield(closing)


_closing: set[asyncio.Future[None]] = set()


async def _close_stream(answer: Upstream, books: _Books) -> None:
    try:
        if answer.close is not None:
            await answer.close()
    finally:
        call = books.call  # always opened before anything is streamed
        status = call.extra.get("status", "ok") if call is not None else "ok"
        await books.close(status=status if answer.completed else "client_disconnect")


async def _parse(
    request: Request, kind: str, identity: Identity, request_id: str, started: float
) -> Call:
    body = await read_body(request)
    try:
        validate_body(body, kind)
    except GatewayError as refused:
        if refused.code == "cache_salt_not_allowed":  # a security refusal: audited
            await db_sync_to_async(identity_refused)(
                identity, action="gateway.cache_salt.refuse", reason="client_cache_salt"
            )
        raise
    priority = request.headers.get("x-cacheplane-priority", "interactive").lower()
    if priority not in PRIORITIES:
        raise GatewayError(
            400,
            "invalid_priority",
            "x-cacheplane-priority must be 'interactive' or 'batch'.",
        )
    cache = await resolve_cache(identity, body, request)
    options = body.get("stream_options") or {}
    return Call(
        kind=kind,
        body=body,
        identity=identity,
        cache=cache,
        request_id=request_id,
        priority=priority,
        session=request.headers.get("x-session-id"),
        started=started,
        model=body["model"],
        stream=bool(body.get("stream")),
        client_wants_usage=bool(options.get("include_usage")),
    )


def _queue_timeout() -> float:
    from django.conf import settings

    return settings.CACHEPLANE_GATEWAY_QUEUE_TIMEOUT_SECONDS


@dataclass
class _Books:
    """What a request has taken so far, and closing it exactly once."""

    call: Call | None = None
    provider: str = ""
    admission: ratelimit.Admission | None = None
    target: Target | None = None
    queue: fairshare.FairQueue | None = None
    slot: bool = False
    rates: pricing.Rates | None = None
    hold: budget.Hold | None = None
    sent: bool = False
    closed: bool = False

    def open(self, call: Call, provider: str) -> None:
        self.call, self.provider = call, provider

    async def give_back(self) -> None:
        """Return the rate-limit slot and the hold taken so far (nothing was sent)."""
        await limits.close(self.admission, self.hold, actual_tokens=0, actual_micros=0)
        self.admission, self.hold, self.rates = None, None, None

    def rate_headers(self) -> dict[str, str]:
        return self.admission.headers if self.admission is not None else {}

    async def close(self, *, status: str, estimate: bool = False) -> None:
        """Give back the fair-share slot and the rate-limit slot, settle the hold with
        the request's cost, record usage. Never raises (the answer is already decided).
        ``estimate``: no usage came back (a timeout); the reservation is booked, flagged."""
        if self.closed:
            return
        self.closed = True
        if self.slot and self.queue is not None:
            self.queue.release()
        call = self.call
        if call is None:
            return
        usage = call.usage
        counts = UsageCounts(
            prompt_tokens=usage.prompt_tokens,
            cached_read_tokens=min(usage.cached_tokens, usage.prompt_tokens),
            cache_write_5m_tokens=usage.cache_write_5m_tokens,
            cache_write_1h_tokens=usage.cache_write_1h_tokens,
            # Audio output is its own count (priced at the audio output rate), on top.
            output_tokens=usage.output_tokens - usage.audio_output_tokens,
            audio_prompt_tokens=usage.audio_prompt_tokens,
            audio_cached_read_tokens=usage.audio_cached_tokens,
            audio_output_tokens=usage.audio_output_tokens,
        )
        used = usage.prompt_tokens + usage.output_tokens  # audio output included
        # Priced at the close, as the ledger's row is (a time-of-day discount applies).
        cost = pricing.cost_micros(self.rates, counts, at=datetime.now(tz=UTC))
        estimate_nanos = None
        if estimate and self.sent:
            estimate_micros = self._reserved_micros(call)
            if estimate_micros is not None:
                cost, estimate_nanos = estimate_micros, estimate_micros * 1000
        part = limits.close_part(
            self.admission,
            self.hold,
            actual_tokens=used if self.sent else 0,
            actual_micros=cost,
        )
        if not self.sent:  # refused by a step (429, 402, 503) before sending
            await closing.close(part, None)
            return
        target = self.target
        extra = call.extra
        meter = Meter(
            request_id=call.ledger_key or call.request_id,
            client_request_id=call.request_id,
            started_at=call.started_at or None,
            estimate_nanos=estimate_nanos,
            tenant_id=call.identity.tenant_id,
            tenant_slug=call.identity.tenant_slug,
            key_id=call.identity.key_id,
            principal_id=call.identity.principal_id,
            provider=self.provider,
            model=call.model,
            stream=call.stream,
            started=call.started,
            worker=target.worker if target else "",
            pool=target.pool if target else "",
            cache_id=call.cache.id if call.cache else None,
            predicted_hit=bool(extra.get("predicted_hit")),
            prompt_tokens=counts.prompt_tokens,
            cached_tokens=counts.cached_read_tokens,
            cache_write_5m_tokens=counts.cache_write_5m_tokens,
            cache_write_1h_tokens=counts.cache_write_1h_tokens,
            output_tokens=counts.output_tokens,
            audio_prompt_tokens=counts.audio_prompt_tokens,
            audio_cached_tokens=counts.audio_cached_read_tokens,
            audio_output_tokens=counts.audio_output_tokens,
            ttft_ms=call.ttft_ms,
            latency_ms=int((time.perf_counter() - call.started) * 1000),
            status=status,
            available_tokens=int(extra.get("available_tokens", 0)),
            routed_tokens=int(extra.get("routed_tokens", 0)),
            cost_micros=cost if self.rates is not None else None,
            extra={"autopilot": extra["autopilot"]} if extra.get("autopilot") else {},
        )
        await closing.close(part, meter)

    def _reserved_micros(self, call: Call) -> int | None:
        """Its hold, else its priced upper bound (None: no price, nothing to estimate)."""
        if self.hold is not None and self.hold.amount_micros:
            return self.hold.amount_micros
        if self.rates is None:
            return None
        bound, most = call.prompt_tokens_bound, call.max_output_tokens
        return pricing.upper_bound_micros(self.rates, prompt_tokens=bound, max_output_tokens=most)


__all__ = ["Adapter", "handle"]
