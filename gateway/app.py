"""The OpenAI-compatible data plane: a Starlette app mounted at ``/v1`` beside Django.

No Django middleware on the hot path, and no Starlette middleware either: ``app`` sends
the two model routes (``POST``) straight to ``gateway.pipeline.handle`` (the whole
pipeline, in one readable function) and everything else through the Starlette app (its
router, ``/v1/models``, 404 and 405). Every error is OpenAI's error shape with a stable
``code``; an unexpected exception is ``500 internal_error``, as Starlette's handler
below answers it.
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway import upstream
from gateway.adapters.vllm import prefix_index
from gateway.directory import directory
from gateway.errors import GatewayError
from gateway.identity import identify
from gateway.pipeline import handle
from tenants.authentication import scope_source

logger = logging.getLogger(__name__)


async def _model_cards(request: Request) -> list[dict[str, object]] | Response:
    """The model cards the caller may use (after authentication), or the error response."""
    try:
        await identify(request.headers.get("authorization"), source=scope_source(request.scope))
    except GatewayError as exc:
        return exc.response()
    from caches.catalog import VERTEX_MODELS

    workers = await directory.current_workers()
    served = sorted({w.model for w in workers})
    data: list[dict[str, object]] = [
        {"id": m, "object": "model", "created": 0, "owned_by": "vllm"} for m in served
    ]
    data += [
        {"id": m, "object": "model", "created": 0, "owned_by": "vertex"}
        for m in sorted(VERTEX_MODELS)
    ]
    return data


async def list_models(request: Request) -> Response:
    cards = await _model_cards(request)
    if isinstance(cards, Response):
        return cards
    return JSONResponse({"object": "list", "data": cards})


async def retrieve_model(request: Request) -> Response:
    """``GET /v1/models/{id}`` (the SDK's ``models.retrieve``); ids may contain slashes."""
    cards = await _model_cards(request)
    if isinstance(cards, Response):
        return cards
    model = request.path_params["model"]
    for card in cards:
        if card["id"] == model:
            return JSONResponse(card)
    return GatewayError(
        404, "model_not_found", f"The model {model!r} does not exist.", param="model"
    ).response()


async def chat_completions(request: Request) -> Response:
    return await handle(request, "chat")


async def completions(request: Request) -> Response:
    return await handle(request, "completion")


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error(response: Response) -> Response:
    """An error answer of ``/v1/messages`` in Anthropic's shape (``{"type": "error",
    "error": {"type", "message"}}``, what the Anthropic SDK reads), our stable ``code``
    kept beside the message; headers (Retry-After, rate limits) unchanged."""
    import json

    try:
        error = json.loads(bytes(response.body))["error"]
    except (ValueError, KeyError, TypeError):
        return response
    shaped = {
        "type": "error",
        "error": {
            "type": _ANTHROPIC_ERROR_TYPES.get(response.status_code, "api_error"),
            "message": error.get("message", ""),
            "code": error.get("code"),
            **({"details": error["details"]} if "details" in error else {}),
        },
    }
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return JSONResponse(shaped, status_code=response.status_code, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (unknown path, wrong method) in OpenAI's shape."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        error = GatewayError(404, "not_found", f"No route {request.url.path!r} on this API.")
    elif status == 405:
        error = GatewayError(
            405,
            "method_not_allowed",
            f"{request.method} is not allowed on {request.url.path!r}.",
            headers=dict(exc.headers or {}) if isinstance(exc, HTTPException) else None,
        )
    else:
        error = GatewayError(status, "http_error", str(getattr(exc, "detail", "")))
    return error.response()


async def _server_error(request: Request, exc: Exception) -> Response:
    return GatewayError(500, "internal_error", "The gateway failed; this is a bug.").response()


def create_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error, 500: _server_error},
    )


_routes = create_app()
_MODEL_ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/v1/messages": "messages",  # Anthropic's inbound shape (Anthropic SDK's base_url)
}


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The gateway's ASGI app: model requests to the pipeline, the rest to ``_routes``."""
    kind = _MODEL_ROUTES.get(scope["path"]) if scope["type"] == "http" else None
    if kind is None or scope["method"] != "POST":
        await _routes(scope, receive, send)
        return
    if kind == "messages":
        scope = _x_api_key_as_bearer(scope)
    request = Request(scope, receive)
    try:
        response = await handle(request, kind)
    except Exception:
        logger.exception("gateway request failed", extra={"path": scope["path"]})
        response = await _server_error(request, RuntimeError("unhandled"))
    if kind == "messages" and response.status_code >= 400:
        response = anthropic_error(response)
    await response(scope, receive, send)


def _x_api_key_as_bearer(scope: Scope) -> Scope:
    """The Anthropic SDK sends its key as ``x-api-key``: the same key, as a bearer token,
    for the one authentication step (an ``Authorization`` header wins)."""
    headers = scope["headers"]
    if any(name == b"authorization" for name, _ in headers):
        return scope
    for name, value in headers:
        if name == b"x-api-key":
            return {**scope, "headers": [*headers, (b"authorization", b"Bearer " + value)]}
    return scope


async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
    """ASGI lifespan: on shutdown, close the worker connections (``gateway.upstream``)
    so the process ends without aiohttp's "Unclosed connector" warning."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await directory.loads_published()
            await upstream.close()
            await send({"type": "lifespan.shutdown.complete"})
            return


__all__ = ["app", "create_app", "lifespan", "prefix_index"]
