"""Talking to vLLM-protocol workers: one pooled aiohttp session per event loop, SSE relay.

Why aiohttp rather than httpx: measured with the gateway's request (a 2 kB chat body,
32 in flight, keep-alive, one connection pool), httpx's transport cost about 3 ms of CPU
per request on this project's 2-core machine and aiohttp's 0.45 ms (httpx needed its
pool split 16 ways to stay near that, a workaround for encode/httpcore#928). One
session per event loop, HTTP/1.1 keep-alive, at most
``MAX_CONNECTIONS`` connections. The adapters see :class:`Response` and the errors below,
never the library.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import msgspec
from django.conf import settings

from controlplane.loop_local import LoopLocal

MAX_CONNECTIONS = 1024
_encode = msgspec.json.Encoder().encode


class UpstreamError(Exception):
    """The request did not get an answer from the worker."""


class ConnectFailed(UpstreamError):
    """No connection (refused, unreachable, connect timeout): another worker may take it."""


class UpstreamTimeout(UpstreamError):
    """Connected, but the worker did not answer in time."""


class ConnectionDropped(UpstreamError):
    """The connection broke before the worker answered anything (the worker closed an
    idle kept-alive connection as it was reused, or reset it): worth sending once more.
    ``reason``: ``server_disconnected`` or ``connection_reset``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail or reason)
        self.reason = reason


class Response:
    """A worker's answer whose body is not read yet (``aread``/``aiter_bytes``, ``aclose``)."""

    def __init__(
        self, raw: aiohttp.ClientResponse, *, owner: aiohttp.ClientSession | None = None
    ) -> None:
        self._raw = raw
        self._owner = owner  # a session of its own (the retry), closed with the response
        self.status_code = raw.status
        self.headers: Mapping[str, str] = raw.headers  # case-insensitive

    async def aread(self) -> bytes:
        try:
            return await self._raw.read()
        except TimeoutError as exc:
            raise UpstreamTimeout("The worker did not answer in time.") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamError(str(exc) or type(exc).__name__) from exc

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        async for chunk in self._raw.content.iter_any():
            yield chunk

    async def aclose(self) -> None:
        # Back to the pool when the body was read to its end, closed otherwise.
        self._raw.release()
        if self._owner is not None:
            owner, self._owner = self._owner, None
            await owner.close()


def _session_new() -> aiohttp.ClientSession:
    timeout = settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0),
        # connect: waiting for a pooled connection included; sock_read: between bytes.
        timeout=aiohttp.ClientTimeout(
            total=None, connect=timeout, sock_connect=5.0, sock_read=timeout
        ),
        cookie_jar=aiohttp.DummyCookieJar(),  # never carry one worker's cookies on
        skip_auto_headers=("User-Agent",),
    )


_sessions: LoopLocal[aiohttp.ClientSession] = LoopLocal(_session_new)


def session() -> aiohttp.ClientSession:
    """The running loop's session (a restarted loop, e.g. in tests, gets its own)."""
    found = _sessions.get()
    if found.closed:
        _sessions.pop()
        found = _sessions.get()
    return found


def _body(payload: dict[str, Any]) -> bytes:
    try:
        return _encode(payload)
    except (OverflowError, TypeError):  # e.g. an integer beyond 64 bits: the slow way
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _fresh_session() -> aiohttp.ClientSession:
    """A session of one connection, not kept alive (closed with its response)."""
    timeout = settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1, force_close=True),
        timeout=aiohttp.ClientTimeout(
            total=None, connect=timeout, sock_connect=5.0, sock_read=timeout
        ),
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent",),
    )


async def post(
    url: str, *, json: dict[str, Any], headers: dict[str, str], fresh: bool = False
) -> Response:
    """Send; raises :class:`ConnectFailed`, :class:`ConnectionDropped`,
    :class:`UpstreamTimeout` or :class:`UpstreamError` when no answer started.

    ``fresh``: on a connection opened for this request alone (closed with its response)
    instead of the loop's pool: the retry after a dropped connection."""
    own = _fresh_session() if fresh else None
    try:
        raw = await (own or session()).post(
            url,
            data=_body(json),
            headers={**headers, "Content-Type": "application/json"},
            allow_redirects=False,
        )
    except BaseException as exc:
        if own is not None:
            await own.close()
        if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
            raise ConnectFailed(str(exc) or type(exc).__name__) from exc
        if isinstance(exc, TimeoutError):
            raise UpstreamTimeout("The worker did not answer in time.") from exc
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            raise ConnectionDropped("server_disconnected", str(exc)) from exc
        if isinstance(exc, aiohttp.ClientOSError):  # reset while writing or reading
            raise ConnectionDropped("connection_reset", str(exc)) from exc
        if isinstance(exc, aiohttp.ClientError):
            raise UpstreamError(str(exc) or type(exc).__name__) from exc
        raise
    return Response(raw, owner=own)


async def close() -> None:
    """Close the running loop's session (ASGI lifespan shutdown; tests starting or
    ending an event loop). The next :func:`session` opens a new one."""
    found = _sessions.pop()
    if found is not None:
        await found.close()


def parse_sse_event(event: bytes) -> dict[str, Any] | None:
    """The JSON of one ``data:`` event (None for ``[DONE]`` and non-data lines)."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return None
            try:
                event_json: dict[str, Any] | None = json.loads(payload)
            except ValueError:
                return None
            return event_json
    return None


async def sse_events(response: Response) -> AsyncIterator[bytes]:
    """Whole SSE events (``...\\n\\n``) from an upstream streaming response."""
    buffer = b""
    async for chunk in response.aiter_bytes():
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            yield event + b"\n\n"
    if buffer.strip():
        yield buffer
