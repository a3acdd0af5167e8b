"""One request, top to bottom: authenticate → authorize → route → price → rate-limit +
reserve (one atomic step, ``gateway.limits``) → fair share → send → meter/settle.

Every step runs once, here, for every provider; what differs per provider (the upstream
request, where it goes, how its answer and usage look) is an adapter
(``gateway.adapters``). A step that refuses raises ``GatewayError`` (OpenAI's error
shape, a stable ``code``); everything taken before it (a rate-limit slot, a fair-share
slot, a budget hold) is given back by ``Books.close``, which runs exactly once per
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

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from billing.services.budget_reservations import hold_new_id
from controlplane.db import db_sync_to_async
from controlplane.request_context import sanitize_request_id
from gateway import budget, fairshare, limits, pricing, ratelimit
from gateway.adapters.base import Adapter, Call, Target, Upstream
from gateway.adapters.hosted import sse
from gateway.adapters.registry import adapter_for
from gateway.books import Books, call_upper_bound_micros
from gateway.cache_reference import resolve_cache
from gateway.errors import GatewayError
from gateway.event_stream import EventStreamResponse
from gateway.identity import Identity, identify, identity_refused, stream_watch
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
    books = Books()
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


async def _price_and_admit(books: Books, call: Call, provider: str, pool: str) -> None:
    """Price the call's upper bound for ``pool`` and take its rate limits and budget hold
    (429 or 402 with nothing taken)."""
    books.rates = await pricing.rates(provider, call.model, pool)
    estimate = call_upper_bound_micros(books.rates, call) if books.rates is not None else None
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


async def _relay(answer: Upstream, books: Books) -> AsyncIterator[bytes]:
    """The adapter's events to the client; the books close whatever way the stream ends.

    A key revoked (a principal disabled, a tenant suspended) while it streams ends the
    stream with an error event within the re-check's cadence (``stream_watch``), even
    while the upstream is silent; what was streamed is booked as for a client leaving.
    """
    assert answer.events is not None and books.call is not None, "an opened stream"
    watch = stream_watch(books.call.identity)
    try:
        events = aiter(answer.events)
        while watch.refused is None:
            watch.waiting = True
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if not watch.interrupted():
                    raise  # the client left (or shutdown): not this watch's doing
                break
            finally:
                watch.waiting = False
            if watch.refused is None:
                yield event
        watch.interrupted()  # a cancellation the upstream swallowed
        if watch.refused is not None:
            yield _error_event(watch.refused, books.call.kind)
    finally:
        watch.end()
        # A client that went away cancels this generator, and Starlette's cancel scope
        # cancels every await here too: the closing runs as its own task, shielded, so
        # the stream is booked from what was streamed even then.
        closing = asyncio.ensure_future(_close_stream(answer, books))
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)
        await asyncio.shield(closing)


_closing: set[asyncio.Future[None]] = set()


def _error_event(error: GatewayError, kind: str) -> bytes:
    """The last event of a stream ended by the gateway, in the endpoint's error shape."""
    if kind == "messages":
        shaped = {
            "type": "error",
            "error": {
                "type": "permission_error" if error.status == 403 else "authentication_error",
                "message": error.message,
                "code": error.code,
            },
        }
        return sse(shaped, "error")
    return sse(error.body())


async def _close_stream(answer: Upstream, books: Books) -> None:
    """Book a stream however it ended: from the counts the adapter kept (the provider's
    usage, else what was streamed), or, when those do not price it (a reasoning model
    cut before its usage: ``Call.cut_cost_known``), its reservation as a flagged
    estimate, as for a timeout (corrected by ``usage_estimate_correct``)."""
    try:
        if answer.close is not None:
            await answer.close()
    finally:
        call = books.call  # always opened before anything is streamed
        status = call.extra.get("status", "ok") if call is not None else "ok"
        await books.close(
            status=status if answer.completed else "client_disconnect",
            estimate=call is not None and not call.cut_cost_known,
        )


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


__all__ = ["Adapter", "handle"]
