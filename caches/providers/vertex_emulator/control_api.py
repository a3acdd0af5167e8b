"""``/_emulator/…``: the emulator's knobs over HTTP, for an emulator in another process.

These paths sit outside Google's URL space so no client can hit them by accident, and they
need no token: the emulator is a local test tool. Each one mirrors a method of
``VertexEmulator`` (``inject_fault``, ``set_latency``, ``reset``, ``state``, …).

==========================  ===============================================================
``GET  /_emulator/healthz``  ``{"ok": true}`` once serving (readiness probe)
``GET  /_emulator/state``    caches (with their stored inputs), faults, latency, models …
``POST /_emulator/reset``    forget caches, faults, latency, allow-lists, log, clock offset
``POST /_emulator/faults``   ``{"status":429,"count":2,"methods":["POST"],
                             "path_contains":"cachedContents","message":null,
                             "wrap_in_array":false}``; ``count: null`` = until cleared;
                             ``{"drop_reply":true,…}`` cuts the reply after the effect
``GET|DELETE …/faults``      list / clear the rules
``POST /_emulator/latency``  ``{"ms": 250}``
``POST /_emulator/clock``    ``{"advance_seconds": 3600}``
``POST /_emulator/tokens``   ``{"project": "p1", "tokens": ["t1"]}``; ``DELETE`` lifts all
``POST /_emulator/models``   ``{"model": "gemini-x", "min_cache_tokens": 4096}``
``GET  /_emulator/requests`` the request log; ``?method=POST&path_contains=cachedContents``
==========================  ===============================================================
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .rpc_errors import RpcError, invalid_argument

if TYPE_CHECKING:
    from .emulator import VertexEmulator

Handler = Callable[[Request], Awaitable[Response]]


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise invalid_argument("control request body must be JSON") from None
    if not isinstance(data, dict):
        raise invalid_argument("control request body must be a JSON object")
    return data


def _guarded(handler: Handler) -> Handler:
    """Turn bad input (RpcError, ValueError, TypeError) into a 400 Status body."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except RpcError as error:
            return JSONResponse(error.to_body(), status_code=error.code)
        except KeyError as error:
            bad = invalid_argument(f"bad control request: missing field {error}")
            return JSONResponse(bad.to_body(), status_code=400)
        except (ValueError, TypeError) as error:
            bad = invalid_argument(f"bad control request: {error}")
            return JSONResponse(bad.to_body(), status_code=400)

    return run


def control_routes(emulator: VertexEmulator) -> list[BaseRoute]:
    """The ``/_emulator`` routes bound to one emulator."""

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def state(_request: Request) -> Response:
        return JSONResponse(emulator.state())

    async def reset(_request: Request) -> Response:
        emulator.reset()
        return JSONResponse({})

    async def faults(request: Request) -> Response:
        if request.method == "GET":
            return JSONResponse({"faults": emulator.faults.snapshot()})
        if request.method == "DELETE":
            emulator.clear_faults()
            return JSONResponse({})
        data = await _json_object(request)
        count = data.get("count", 1)
        if data.get("drop_reply"):
            rule = emulator.drop_replies(
                count=None if count is None else int(count),
                methods=data.get("methods"),
                path_contains=str(data.get("path_contains", "")),
            )
            return JSONResponse(rule.to_state())
        rule = emulator.inject_fault(
            int(data["status"]),
            count=None if count is None else int(count),
            methods=data.get("methods"),
            path_contains=str(data.get("path_contains", "")),
            message=data.get("message"),
            wrap_in_array=bool(data.get("wrap_in_array", False)),
        )
        return JSONResponse(rule.to_state())

    async def latency(request: Request) -> Response:
        data = await _json_object(request)
        emulator.set_latency(int(data["ms"]))
        return JSONResponse({"latency_ms": emulator.faults.latency_ms})

    async def clock(request: Request) -> Response:
        data = await _json_object(request)
        now = emulator.advance_clock(float(data["advance_seconds"]))
        return JSONResponse({"now": now.isoformat()})

    async def tokens(request: Request) -> Response:
        if request.method == "DELETE":
            emulator.clear_token_allow_list(request.query_params.get("project"))
            return JSONResponse({})
        data = await _json_object(request)
        token_list = data["tokens"]
        if not isinstance(token_list, list):
            raise invalid_argument("tokens must be a list of strings")
        emulator.allow_tokens(str(data["project"]), [str(token) for token in token_list])
        return JSONResponse({})

    async def models(request: Request) -> Response:
        data = await _json_object(request)
        emulator.catalog.set_model(str(data["model"]), int(data["min_cache_tokens"]))
        return JSONResponse({"models": emulator.catalog.snapshot()})

    async def requests(request: Request) -> Response:
        entries = emulator.requests(
            method=request.query_params.get("method"),
            path_contains=request.query_params.get("path_contains"),
        )
        return JSONResponse({"requests": [entry.to_state() for entry in entries]})

    return [
        Route("/healthz", _guarded(healthz), methods=["GET"]),
        Route("/state", _guarded(state), methods=["GET"]),
        Route("/reset", _guarded(reset), methods=["POST"]),
        Route("/faults", _guarded(faults), methods=["GET", "POST", "DELETE"]),
        Route("/latency", _guarded(latency), methods=["POST"]),
        Route("/clock", _guarded(clock), methods=["POST"]),
        Route("/tokens", _guarded(tokens), methods=["POST", "DELETE"]),
        Route("/models", _guarded(models), methods=["POST"]),
        Route("/requests", _guarded(requests), methods=["GET"]),
    ]
