"""The OpenAI-compatible data plane: authenticate → authorize → budget → route → proxy → meter.

A Starlette app mounted at ``/v1`` beside Django (see ``controlplane/asgi.py``): no Django
middleware on the hot path, and every database read it needs is cached for a few seconds
(``gateway.identity``, ``gateway.directory``, ``gateway.budget``). Errors use OpenAI's
error shape with a stable ``code``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from controlplane.request_context import sanitize_request_id
from gateway import budget, upstream
from gateway.accounting import finish, meter_usage
from gateway.directory import CacheView, WorkerView, directory
from gateway.errors import GatewayError
from gateway.identity import Identity, identify, identity_refused
from gateway.metering import Meter
from gateway.requests import max_tokens, prompt_text, read_body, validate_body
from gateway.routing import PrefixIndex, order_candidates, pool_under_pressure, route_request

logger = logging.getLogger(__name__)
prefix_index = PrefixIndex()
MAX_FAILOVER = 3


def _audit_security(identity: Identity, action: str, details: dict) -> None:
    identity_refused(identity, action=action, reason=action.rsplit(".", 1)[-1], details=details)


async def _resolve_cache(
    identity: Identity, body: dict[str, Any], request: Request
) -> CacheView | None:
    reference = body.pop("cache", None) or request.headers.get("x-cacheplane-cache")
    if reference is None:
        return None
    if not isinstance(reference, str) or not 0 < len(reference) <= 100:
        raise GatewayError(
            400, "invalid_request", "'cache' must be a cache id or name.", param="cache"
        )
    cache = await directory.cache(identity.tenant_id, reference)
    if cache is None:
        await sync_to_async(_audit_security, thread_sensitive=False)(
            identity, "gateway.cache.not_found", {"reference": reference}
        )
        raise GatewayError(404, "cache_not_found", f"No live cache {reference!r}.", param="cache")
    if cache.model != body["model"]:
        raise GatewayError(
            400,
            "cache_model_mismatch",
            f"Cache {cache.name!r} is for model {cache.model!r}.",
            param="model",
        )
    return cache


async def handle(request: Request, kind: str) -> Response:
    started = time.perf_counter()
    request_id = sanitize_request_id(request.headers.get("x-request-id"))
    try:
        identity = await identify(
            request.headers.get("authorization"),
            source_ip=request.client.host if request.client else None,
            user_agent=request.headers.get("user-agent", ""),
        )
        body = await read_body(request)
        try:
            validate_body(body, kind)
        except GatewayError as refused:
            if refused.code == "cache_salt_not_allowed":  # a security refusal: audited
                await sync_to_async(identity_refused, thread_sensitive=False)(
                    identity, action="gateway.cache_salt.refuse", reason="client_cache_salt"
                )
            raise
        cache = await _resolve_cache(identity, body, request)
        await directory.current_workers()
        model = body["model"]
        provider = cache.provider if cache else _provider_for(model)
        meter = Meter(
            request_id=request_id,
            tenant_id=identity.tenant_id,
            tenant_slug=identity.tenant_slug,
            key_id=identity.key_id,
            principal_id=identity.principal_id,
            provider=provider,
            model=model,
            stream=bool(body.get("stream")),
            started=started,
            cache_id=cache.id if cache else None,
        )
        if provider == "vertex":
            from gateway.vertex import vertex_generate

            return await vertex_generate(request, identity, body, kind, cache, meter)
        return await _vllm(request, identity, body, kind, cache, meter)
    except GatewayError as exc:
        response = exc.response()
        response.headers["x-request-id"] = request_id
        return response


def _provider_for(model: str) -> str:
    from caches.catalog import VERTEX_MODELS

    if directory.serving(model):
        return "vllm"
    if model in VERTEX_MODELS:
        return "vertex"
    raise GatewayError(
        404, "model_not_found", f"The model {model!r} does not exist.", param="model"
    )


async def _vllm(
    request: Request,
    identity: Identity,
    body: dict[str, Any],
    kind: str,
    cache: CacheView | None,
    meter: Meter,
) -> Response:
    workers = directory.serving(meter.model)
    if not workers:
        raise GatewayError(503, "no_worker", f"No healthy worker serves {meter.model!r}.")
    priority = request.headers.get("x-cacheplane-priority", "interactive").lower()
    if priority == "batch" and pool_under_pressure(workers):
        raise GatewayError(
            429,
            "kv_memory_pressure",
            "The worker pool's KV cache is above 85 % used; retry batch work later.",
            headers={"Retry-After": "5"},
        )
    if cache is not None and kind != "chat":
        raise GatewayError(
            400,
            "cache_requires_chat",
            "vLLM caches are used through /v1/chat/completions.",
            param="cache",
        )
    if cache is not None:
        body["messages"] = [cache.prefix_message, *body["messages"]]
    body["cache_salt"] = identity.cache_salt
    client_wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    if meter.stream:
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}

    text = prompt_text(body, kind)
    chain: list[str] = []
    if cache is not None:
        candidates = order_candidates(
            key=cache.routing_key, workers=workers, inflight=directory.inflight
        )[:MAX_FAILOVER]
        meter.predicted_hit = candidates[0].name in cache.placement
        meter.available_tokens = len(cache.prefix_message["content"]) // 4
        meter.routed_tokens = meter.available_tokens if meter.predicted_hit else 0
    else:
        decision = await route_request(
            body=body,
            kind=kind,
            text=text,
            workers=workers,
            salt=identity.cache_salt,
            tenant_id=identity.tenant_id,
            session=request.headers.get("x-session-id"),
            inflight=directory.inflight,
            approx_index=prefix_index,
            replica=directory.replica,
        )
        candidates = decision.candidates[:MAX_FAILOVER]
        chain = decision.chain
        meter.available_tokens = decision.available_tokens
        meter.predicted_hit = decision.available_tokens > 0
        meter.routed_tokens = decision.routed_tokens
    reservation = await budget.reserve(
        meter,
        prompt_tokens=max(1, len(text) // 4),
        max_tokens=max_tokens(body),
        authenticated=identity.authenticated,
    )
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    headers = {"X-Request-Id": meter.request_id}
    if settings.CACHEPLANE_VLLM_API_KEY:
        headers["Authorization"] = f"Bearer {settings.CACHEPLANE_VLLM_API_KEY}"
    try:
        worker, upstream_started, response = await _send(
            candidates, path, body, headers, meter.stream
        )
    except GatewayError:
        meter.status = "upstream_error"
        await finish(meter, reservation)
        raise
    meter.worker, meter.pool = worker.name, worker.pool
    overhead_ms = (upstream_started - meter.started) * 1000
    if meter.stream and response.status_code == 200:
        return StreamingResponse(
            _relay_stream(response, worker, meter, reservation, chain, client_wants_usage),
            media_type="text/event-stream",
            headers={
                "x-cacheplane-overhead-ms": f"{overhead_ms:.2f}",
                "x-request-id": meter.request_id,
                "cache-control": "no-cache",
            },
        )
    try:
        raw = await response.aread()
    finally:
        await response.aclose()
        directory.release(worker.name)
    upstream_ms = (time.perf_counter() - upstream_started) * 1000
    payload = _json_or_none(raw)
    if response.status_code != 200 or payload is None:
        meter.status = "upstream_error"
        await finish(meter, reservation)
        status = response.status_code if response.status_code != 200 else 502
        body_out = (
            payload
            if isinstance(payload, dict) and "error" in payload
            else GatewayError(
                502, "upstream_error", "The worker returned an invalid response."
            ).body()
        )
        return JSONResponse(
            body_out, status_code=status, headers={"x-request-id": meter.request_id}
        )
    meter_usage(meter, payload.get("usage") or {})
    meter.ttft_ms = meter.latency_ms = int((time.perf_counter() - meter.started) * 1000)
    if chain:
        prefix_index.record(chain, worker.name)
    await finish(meter, reservation)
    total_ms = (time.perf_counter() - meter.started) * 1000
    return Response(
        raw,
        media_type="application/json",
        headers={
            "x-cacheplane-overhead-ms": f"{max(total_ms - upstream_ms, 0):.2f}",
            "x-cacheplane-worker": worker.name,
            "x-request-id": meter.request_id,
        },
    )


async def _send(
    candidates: list[WorkerView], path: str, body: dict, headers: dict, stream: bool
) -> tuple[WorkerView, float, httpx.Response]:
    """Send to the first candidate that accepts a connection (failover on connect errors)."""
    last_error = "no candidate"
    for worker in candidates:
        directory.acquire(worker.name)
        started = time.perf_counter()
        try:
            response = await upstream.pool().post(
                worker.base_url + path, json=body, headers=headers
            )
            return worker, started, response
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            directory.release(worker.name)
            prefix_index.forget_worker(worker.name)
            last_error = f"{worker.name}: {exc}"
            continue
        except httpx.TimeoutException:
            directory.release(worker.name)
            raise GatewayError(
                504, "upstream_timeout", "The worker did not answer in time."
            ) from None
        except httpx.HTTPError as exc:
            directory.release(worker.name)
            raise GatewayError(
                502, "upstream_error", f"The worker connection failed: {exc}"
            ) from None
    raise GatewayError(
        503, "upstream_unavailable", f"No worker accepted the request ({last_error})."
    )


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


async def _relay_stream(
    response: httpx.Response,
    worker: WorkerView,
    meter: Meter,
    reservation,
    chain: list[str],
    client_wants_usage: bool,
):
    """Pass SSE events through, metering usage and time to first token on the way."""
    completed = False
    try:
        async for event in upstream.sse_events(response):
            data = upstream.parse_sse_event(event)
            if data is not None:
                if data.get("usage"):
                    meter_usage(meter, data["usage"])
                    if not data.get("choices") and not client_wants_usage:
                        continue  # the usage-only chunk the client did not ask for
                if meter.ttft_ms is None and data.get("choices"):
                    meter.ttft_ms = int((time.perf_counter() - meter.started) * 1000)
            elif b"[DONE]" in event:
                completed = True
            yield event
    finally:
        await response.aclose()
        directory.release(worker.name)
        if not completed:
            meter.status = "client_disconnect"
        if chain and completed:
            prefix_index.record(chain, worker.name)
        await finish(meter, reservation)


async def list_models(request: Request) -> Response:
    try:
        await identify(
            request.headers.get("authorization"),
            source_ip=request.client.host if request.client else None,
            user_agent=request.headers.get("user-agent", ""),
        )
    except GatewayError as exc:
        return exc.response()
    from caches.catalog import VERTEX_MODELS

    workers = await directory.current_workers()
    served = sorted({w.model for w in workers})
    data = [{"id": m, "object": "model", "created": 0, "owned_by": "vllm"} for m in served]
    data += [
        {"id": m, "object": "model", "created": 0, "owned_by": "vertex"}
        for m in sorted(VERTEX_MODELS)
    ]
    return JSONResponse({"object": "list", "data": data})


async def chat_completions(request: Request) -> Response:
    return await handle(request, "chat")


async def completions(request: Request) -> Response:
    return await handle(request, "completion")


def create_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
        ]
    )


app = create_app()
