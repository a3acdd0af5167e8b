"""The Starlette app: Vertex's REST paths under ``/v1`` and ``/v1beta1``, knobs under
``/_emulator``.

Google paths are matched here with regular expressions rather than Starlette route params,
because the verbs ride on the last segment after a colon (``…/models/gemini-2.5-flash:
generateContent``). Each request goes through the same steps, in the order a Google front end
would apply them: latency, injected fault, routing (404), authentication (401), the
allow-list (403), JSON parsing (400), the operation itself. Every step's failure is a
google.rpc.Status body, and every request is logged with the status it got.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from .access import authorize, bearer_token
from .cached_contents import cache_name, parent_name
from .control_api import control_routes
from .generation import count_tokens, generate_content
from .request_log import RecordedRequest, loggable_headers, token_fingerprint
from .rpc_errors import INTERNAL_MESSAGE, RpcError, invalid_argument, not_found

if TYPE_CHECKING:
    from .emulator import VertexEmulator

logger = logging.getLogger(__name__)

API_VERSIONS = ("v1", "v1beta1")

_SEGMENT = r"[^/]+"
_COLLECTION_RE = re.compile(
    rf"^projects/(?P<project>{_SEGMENT})/locations/(?P<location>{_SEGMENT})/cachedContents$"
)
_ITEM_RE = re.compile(
    rf"^projects/(?P<project>{_SEGMENT})/locations/(?P<location>{_SEGMENT})"
    rf"/cachedContents/(?P<cache_id>{_SEGMENT})$"
)
_MODEL_VERB_RE = re.compile(
    rf"^projects/(?P<project>{_SEGMENT})/locations/(?P<location>{_SEGMENT})"
    r"/publishers/google/models/(?P<model_id>[^/:]+)"
    r":(?P<verb>generateContent|streamGenerateContent|countTokens)$"
)


@dataclass(frozen=True)
class Operation:
    """A resolved Google method: who must be allowed, and what to run on the parsed body."""

    project: str
    permission: str
    resource: str
    run: Callable[[Any], Any]
    reads_body: bool = False
    streaming: bool = False


def _unmapped(method: str, path: str) -> RpcError:
    # Google's front end answers unmapped method/path pairs with 404, not 405.
    return not_found(f"{method} {path} is not a method this Vertex emulator serves.")


def resolve_operation(
    emulator: VertexEmulator, *, method: str, resource: str, body_size: int, query: dict[str, str]
) -> Operation:
    """Map a method and a path below ``/{version}/`` onto an :class:`Operation`; 404 if none."""
    caches = emulator.caches
    if match := _COLLECTION_RE.match(resource):
        project, location = match["project"], match["location"]
        parent = parent_name(project, location)
        if method == "POST":
            return Operation(
                project=project,
                permission="aiplatform.cachedContents.create",
                resource=parent,
                run=lambda body: caches.create(
                    project=project, location=location, body=body, body_size=body_size
                ),
                reads_body=True,
            )
        if method == "GET":
            return Operation(
                project=project,
                permission="aiplatform.cachedContents.list",
                resource=parent,
                run=lambda _body: caches.list(
                    project=project,
                    location=location,
                    page_size=query.get("pageSize", query.get("page_size")),
                    page_token=query.get("pageToken", query.get("page_token")),
                ),
            )
    elif match := _ITEM_RE.match(resource):
        project = match["project"]
        name = cache_name(project, match["location"], match["cache_id"])
        verbs: dict[str, tuple[str, Callable[[Any], Any], bool]] = {
            "GET": ("get", lambda _body: caches.get(name=name), False),
            "DELETE": ("delete", lambda _body: caches.delete(name=name), False),
            "PATCH": (
                "update",
                lambda body: caches.patch(
                    name=name,
                    body=body,
                    update_mask=query.get("updateMask", query.get("update_mask")),
                ),
                True,
            ),
        }
        if method in verbs:
            verb, run, reads_body = verbs[method]
            return Operation(
                project=project,
                permission=f"aiplatform.cachedContents.{verb}",
                resource=name,
                run=run,
                reads_body=reads_body,
            )
    elif (match := _MODEL_VERB_RE.match(resource)) and method == "POST":
        project, location, model_id = match["project"], match["location"], match["model_id"]
        model_resource = f"{parent_name(project, location)}/publishers/google/models/{model_id}"
        is_count = match["verb"] == "countTokens"

        def run_model_verb(body: Any) -> Any:
            if is_count:
                return count_tokens(
                    catalog=emulator.catalog,
                    project=project,
                    location=location,
                    model_id=model_id,
                    body=body,
                )
            return generate_content(
                caches=caches,
                catalog=emulator.catalog,
                project=project,
                location=location,
                model_id=model_id,
                body=body,
                blocked_terms=emulator.blocked_terms,
            )

        return Operation(
            project=project,
            permission="aiplatform.endpoints.predict",
            resource=model_resource,
            run=run_model_verb,
            reads_body=True,
            streaming=match["verb"] == "streamGenerateContent",
        )
    raise _unmapped(method, resource)


def _parse_body(raw: bytes) -> Any:
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise invalid_argument("Invalid JSON payload received. Unexpected token.") from None


def _loggable_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", errors="replace")


def error_response(error: RpcError) -> JSONResponse:
    """A google.rpc.Status JSON response."""
    return JSONResponse(error.to_body(), status_code=error.code)


def _paced_chunks(result: dict[str, Any], chunks: int) -> list[dict[str, Any]]:
    """The answer generated ``chunks`` times over, one piece per chunk, as Gemini streams:
    every chunk carries the usage so far (the prompt, and the candidates counted up to
    and including it); only the last one has the finish reason."""
    usage = result["usageMetadata"]
    per_chunk = usage["candidatesTokenCount"]
    pieces = []
    for i in range(chunks):
        candidate = json.loads(json.dumps(result["candidates"][0]))
        if i < chunks - 1:
            candidate.pop("finishReason", None)
        so_far = per_chunk * (i + 1)
        pieces.append(
            {
                **result,
                "candidates": [candidate],
                "usageMetadata": {
                    **usage,
                    "candidatesTokenCount": so_far,
                    "totalTokenCount": usage["promptTokenCount"] + so_far,
                    "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": so_far}],
                },
            }
        )
    return pieces


def _success_response(
    operation: Operation, result: Any, query: dict[str, str], pacing: tuple[int, int] = (1, 0)
) -> Response:
    if not operation.streaming:
        return JSONResponse(result)
    chunks, delay_ms = pacing
    if query.get("alt") == "sse" and chunks > 1 and result.get("candidates"):

        async def paced() -> AsyncIterator[bytes]:
            for piece in _paced_chunks(result, chunks):
                yield f"data: {json.dumps(piece, separators=(',', ':'))}\r\n\r\n".encode()
                await asyncio.sleep(delay_ms / 1000)

        return StreamingResponse(paced(), media_type="text/event-stream")
    if query.get("alt") == "sse":
        # The SDK's stream reader takes "data: " lines; one chunk carries the whole answer.
        chunk = json.dumps(result, separators=(",", ":"))
        return Response(f"data: {chunk}\r\n\r\n", media_type="text/event-stream")
    return JSONResponse([result])


class DroppedReply(Response):
    """A reply cut off mid-body: headers promising more than is sent, then the connection
    closes (uvicorn closes it when the app returns before the body is complete). Logged
    with status 0, as nothing reached the client."""

    def __init__(self) -> None:
        super().__init__(status_code=200)
        self.status_code = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"name": ', "more_body": True})


def build_app(emulator: VertexEmulator) -> Starlette:
    """Build the ASGI app for one emulator."""

    async def google_endpoint(request: Request) -> Response:
        raw = await request.body()
        method = request.method.upper()
        path = request.url.path
        query = dict(request.query_params)
        headers = {key.lower(): value for key, value in request.headers.items()}
        try:
            response = await _serve(request, raw, method, query, headers)
        except RpcError as error:
            response = error_response(error)
        except Exception:
            # A bug in the emulator must still answer a Status body (and be logged), or the
            # SDK reports a confusing non-JSON 500 and the request log misses the call.
            logger.exception("Vertex emulator failed on %s %s", method, path)
            response = error_response(RpcError(500, INTERNAL_MESSAGE))
        token = bearer_token(headers)
        emulator.request_log.record(
            RecordedRequest(
                method=method,
                path=path,
                query=query,
                body=_loggable_body(raw),
                headers=loggable_headers(headers),
                token_fingerprint=token_fingerprint(token) if token else None,
                status=response.status_code,
                received_at=emulator.now(),
            )
        )
        return response

    async def _serve(
        request: Request,
        raw: bytes,
        method: str,
        query: dict[str, str],
        headers: dict[str, str],
    ) -> Response:
        latency_ms = emulator.faults.latency_ms
        if latency_ms:
            await asyncio.sleep(latency_ms / 1000)
        fault = emulator.faults.take(method, request.url.path)
        if fault is not None:
            raise fault
        version = request.path_params["api_version"]
        resource = request.path_params["resource"]
        if version not in API_VERSIONS:
            raise _unmapped(method, request.url.path)
        operation = resolve_operation(
            emulator, method=method, resource=resource, body_size=len(raw), query=query
        )
        authorize(
            headers=headers,
            allow_list=emulator.allow_list,
            project=operation.project,
            permission=operation.permission,
            resource=operation.resource,
        )
        body = _parse_body(raw) if operation.reads_body else None
        result = operation.run(body)
        reply_delay_ms = emulator.faults.reply_delay_ms
        if reply_delay_ms:
            await asyncio.sleep(reply_delay_ms / 1000)
        held = emulator.faults.take_hold(method, request.url.path)
        if held is not None:
            held.reached.set()
            await asyncio.to_thread(held.released.wait, 60)
        if emulator.faults.take_dropped_reply(method, request.url.path):
            return DroppedReply()
        return _success_response(operation, result, query, emulator.faults.stream_pacing)

    async def unmapped_endpoint(request: Request) -> Response:
        return error_response(_unmapped(request.method.upper(), request.url.path))

    methods = ["GET", "POST", "PATCH", "DELETE", "PUT"]
    return Starlette(
        routes=[
            Mount("/_emulator", routes=control_routes(emulator)),
            Route("/{api_version}/{resource:path}", google_endpoint, methods=methods),
            Route("/{anything:path}", unmapped_endpoint, methods=methods),
        ]
    )
