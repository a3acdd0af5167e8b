"""The ASGI app: vLLM's OpenAI-compatible HTTP surface in front of one :class:`Engine`.

Handlers only translate: validate (``openai_protocol``), submit to the engine thread, await
its outputs and shape the response. Paths, status codes and bodies follow vLLM (see
``shared/specs/vllm-protocol.md`` section 1), including the quirks clients depend on: the API
key guards ``/v1`` paths only, dev endpoints do not exist (404) unless dev mode is on, and
``/reset_prefix_cache`` answers 200 with ``{"success": bool}`` (false: blocks in use).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from workers.engine import VERSION, tokenizer
from workers.engine.engine import Engine, EngineDeadError
from workers.engine.metrics import CONTENT_TYPE
from workers.engine.openai_protocol import (
    APIError,
    chat_prompt,
    error_body,
    invalid,
    model_card,
    new_request_id,
    now,
    parse_generation,
    resolve_model,
)
from workers.engine.serving import GenerationServing

logger = logging.getLogger(__name__)


class ApiKeyMiddleware:
    """Bearer auth on paths under ``/v1`` only, answering vLLM's bare 401 body."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        self.app = app
        self.accepted = {f"Bearer {key}".encode() for key in keys}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] != "OPTIONS"
            and scope["path"].removeprefix(scope.get("root_path", "")).startswith("/v1")
            and dict(scope["headers"]).get(b"authorization") not in self.accepted
        ):
            await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _Server:
    """Route handlers bound to one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.config = engine.config
        self.max_model_len = engine.core.max_model_len
        self.created = now()
        self.serving = GenerationServing(engine)

    # -- plumbing ---------------------------------------------------------------------------

    @staticmethod
    async def json_body(request: Request) -> dict[str, Any]:
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            # vLLM 0.32 raises a request validation error here: 400, not 415.
            raise APIError("Unsupported Media Type: Only 'application/json' is allowed")
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise invalid(f"JSON decode error: {exc}") from None
        if not isinstance(body, dict):
            raise invalid("Input should be a valid dictionary or object")
        return body

    # -- always-on endpoints ----------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return Response(status_code=503 if self.engine.dead is not None else 200)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": VERSION})

    async def load_(self, request: Request) -> Response:
        return JSONResponse({"server_load": self.serving.load})

    async def metrics(self, request: Request) -> Response:
        return Response(self.engine.metrics.render(), media_type=CONTENT_TYPE)

    async def models(self, request: Request) -> Response:
        cards = [
            model_card(
                name, root=self.config.model, max_model_len=self.max_model_len, created=self.created
            )
            for name in self.config.served_names
        ]
        return JSONResponse({"object": "list", "data": cards})

    async def tokenize(self, request: Request) -> Response:
        body = await self.json_body(request)
        resolve_model(body, self.config.served_names)
        if "messages" in body:
            ids = chat_prompt(body)
        elif isinstance(body.get("prompt"), str):
            add_special = body.get("add_special_tokens", True) is not False
            ids = tokenizer.encode(body["prompt"], add_special_tokens=add_special)
        else:
            raise invalid("either 'prompt' (a string) or 'messages' is required", "prompt")
        strs = [tokenizer.token_str(t) for t in ids] if body.get("return_token_strs") else None
        return JSONResponse(
            {
                "count": len(ids),
                "max_model_len": self.max_model_len,
                "tokens": ids,
                "token_strs": strs,
            }
        )

    async def detokenize(self, request: Request) -> Response:
        body = await self.json_body(request)
        resolve_model(body, self.config.served_names)
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise invalid("'tokens' must be a list of token ids", "tokens")
        try:
            ids = tokenizer.validate_token_ids(tokens)
        except ValueError as exc:
            raise APIError(str(exc), param="tokens") from None
        return JSONResponse({"prompt": tokenizer.decode(ids, skip_special_tokens=False)})

    # -- render (vLLM's GPU-less preprocessing) ----------------------------------------------

    async def render_chat(self, request: Request) -> Response:
        return await self.render(request, chat=True)

    async def render_completions(self, request: Request) -> Response:
        return await self.render(request, chat=False)

    async def render(self, request: Request, *, chat: bool) -> Response:
        """``POST /v1/{chat/,}completions/render``: the request as the engine would take it.

        vLLM answers with a ``GenerateRequest`` body (token ids, sampling params, salt)
        that ``/inference/v1/generate`` accepts; routers (vllm-router ``kv_aware``,
        llm-d's token producer) use ``token_ids`` to hash blocks exactly as the engine
        does. Chat renders one prompt, completions one per prompt (a list). Validation
        is the generation path's, so a body that renders also generates.
        """
        body = await self.json_body(request)
        gen = parse_generation(
            body, served=self.config.served_names, max_model_len=self.max_model_len, chat=chat
        )
        base_id = request.headers.get("x-request-id") or gen.request_id or new_request_id()
        sampling = dataclasses.asdict(gen.sampling)
        rendered = [
            {
                "request_id": base_id if chat else f"{base_id}-{i}",
                "token_ids": ids,
                "features": None,
                "sampling_params": sampling,
                "model": gen.model,
                "stream": gen.stream,
                "cache_salt": gen.cache_salt,
                "priority": body.get("priority", 0),
                "kv_transfer_params": body.get("kv_transfer_params"),
            }
            for i, ids in enumerate(gen.prompts)
        ]
        return JSONResponse(rendered[0] if chat else rendered)

    # -- generation -------------------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        return await self.generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self.generate(request, chat=True)

    async def generate(self, request: Request, *, chat: bool) -> Response:
        body = await self.json_body(request)
        gen = parse_generation(
            body, served=self.config.served_names, max_model_len=self.max_model_len, chat=chat
        )
        base_id = request.headers.get("x-request-id") or gen.request_id or new_request_id()
        response_id = f"{'chatcmpl' if chat else 'cmpl'}-{base_id}"
        headers = {"X-Request-Id": base_id} if self.config.enable_request_id_headers else None
        if gen.stream:
            return StreamingResponse(
                self.serving.stream(gen, response_id, chat=chat),
                media_type="text/event-stream",
                headers=headers,
            )
        return JSONResponse(
            await self.serving.collect(gen, response_id, chat=chat), headers=headers
        )

    # -- dev-mode endpoints -----------------------------------------------------------------

    async def reset_prefix_cache(self, request: Request) -> Response:
        ok = await self.engine.acall(lambda core: core.reset_prefix_cache())
        return JSONResponse({"success": bool(ok)})  # vLLM 0.32's answer

    async def noop(self, request: Request) -> Response:
        return Response(status_code=200)

    async def sleep(self, request: Request) -> Response:
        try:
            level = int(request.query_params.get("level", "1"))
        except ValueError:
            raise invalid("level must be an integer", "level") from None
        await self.engine.acall(lambda core: core.sleep(level))
        return Response(status_code=200)

    async def wake_up(self, request: Request) -> Response:
        await self.engine.acall(lambda core: core.wake_up())
        return Response(status_code=200)

    async def is_sleeping(self, request: Request) -> Response:
        sleeping = await self.engine.acall(lambda core: core.sleeping)
        return JSONResponse({"is_sleeping": sleeping})

    async def server_info(self, request: Request) -> Response:
        return JSONResponse({"vllm_config": repr(self.config)})


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return JSONResponse(exc.body(), status_code=exc.status)


async def _engine_dead(request: Request, exc: Exception) -> Response:
    return JSONResponse(error_body(str(exc), "InternalServerError", 500), status_code=500)


async def _http_error(request: Request, exc: Exception) -> Response:
    # FastAPI's shape for routing errors, which vLLM inherits (e.g. dev routes when off).
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def create_app(engine: Engine, *, dev_mode: bool | None = None) -> Starlette:
    """Build the ASGI app for a started engine; ``dev_mode`` overrides the engine config."""
    s = _Server(engine)
    routes = [
        Route("/health", s.health, methods=["GET"]),
        Route("/ping", s.health, methods=["GET", "POST"]),
        Route("/version", s.version, methods=["GET"]),
        Route("/load", s.load_, methods=["GET"]),
        Route("/metrics", s.metrics, methods=["GET"]),
        Route("/metrics/", s.metrics, methods=["GET"]),
        Route("/v1/models", s.models, methods=["GET"]),
        Route("/v1/completions", s.completions, methods=["POST"]),
        Route("/v1/chat/completions", s.chat_completions, methods=["POST"]),
        Route("/v1/completions/render", s.render_completions, methods=["POST"]),
        Route("/v1/chat/completions/render", s.render_chat, methods=["POST"]),
        Route("/tokenize", s.tokenize, methods=["POST"]),
        Route("/detokenize", s.detokenize, methods=["POST"]),
    ]
    if engine.config.dev_mode if dev_mode is None else dev_mode:
        logger.warning(
            "SECURITY WARNING: development endpoints are enabled (VLLM_SERVER_DEV_MODE); "
            "never expose this server to untrusted clients"
        )
        routes += [
            Route("/reset_prefix_cache", s.reset_prefix_cache, methods=["POST"]),
            Route("/reset_mm_cache", s.noop, methods=["POST"]),
            Route("/reset_encoder_cache", s.noop, methods=["POST"]),
            Route("/sleep", s.sleep, methods=["POST"]),
            Route("/wake_up", s.wake_up, methods=["POST"]),
            Route("/is_sleeping", s.is_sleeping, methods=["GET"]),
            Route("/server_info", s.server_info, methods=["GET"]),
        ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            APIError: _api_error,
            EngineDeadError: _engine_dead,
            HTTPException: _http_error,
        },
    )
    if engine.config.api_keys:
        app.add_middleware(ApiKeyMiddleware, keys=engine.config.api_keys)
    return app
