"""Talking to vLLM-protocol workers: pooled async HTTP clients, SSE pass-through."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from cachetools import LRUCache
from django.conf import settings

# httpcore's pool visits every pooled connection (a poll() on each idle socket) when a
# request starts and when it ends, so one pool's cost per request grows with the number
# of requests in flight (encode/httpcore#928, #1035). Requests take turns over a few
# small pools instead; together they hold the same connection limits as one pool did.
POOL_SHARDS = 16
MAX_CONNECTIONS = 1024
MAX_KEEPALIVE_CONNECTIONS = 256
# Workers x paths: a handful, parsed once rather than per request (LRU: workers that
# re-register on new ports many times over push the oldest out).
_urls: LRUCache[str, httpx.URL] = LRUCache(maxsize=10_000)


class Pool:
    """One connection pool: a client that builds requests (its default headers, the
    upstream timeout) and the transport that sends them.

    Requests go straight to the transport: ``AsyncClient.send`` would add redirect, auth
    and cookie handling the gateway never uses (its cookie jar would even carry one
    worker's cookies to every later request), about a quarter of httpx's cost per call.
    """

    def __init__(self, timeout: httpx.Timeout, limits: httpx.Limits) -> None:
        self.transport = httpx.AsyncHTTPTransport(limits=limits)
        self.client = httpx.AsyncClient(timeout=timeout, transport=self.transport)

    async def post(
        self, url: str, *, json: dict[str, Any], headers: dict[str, str]
    ) -> httpx.Response:
        """Send; the response's body is not read yet (``aread``/``aiter_bytes``, ``aclose``)."""
        parsed = _urls.get(url)
        if parsed is None:
            parsed = _urls[url] = httpx.URL(url)
        request = self.client.build_request("POST", parsed, json=json, headers=headers)
        return await self.transport.handle_async_request(request)


_pools: list[Pool] = []
_turn = itertools.count()


def pool() -> Pool:
    """One of the process's connection pools, in turn (created on first use)."""
    if not _pools:
        timeout = httpx.Timeout(settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS, connect=5.0)
        limits = httpx.Limits(
            max_connections=MAX_CONNECTIONS // POOL_SHARDS,
            max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS // POOL_SHARDS,
        )
        _pools.extend(Pool(timeout, limits) for _ in range(POOL_SHARDS))
    return _pools[next(_turn) % POOL_SHARDS]


async def pools_close() -> None:
    """Close and forget the process's pools (shutdown; or a test starting a new event loop,
    whose connections must not be the old loop's). The next ``pool()`` opens new ones."""
    closing = list(_pools)
    _pools.clear()
    for each in closing:
        await each.client.aclose()
        await each.transport.aclose()


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


async def sse_events(response: httpx.Response) -> AsyncIterator[bytes]:
    """Whole SSE events (``...\\n\\n``) from an upstream streaming response."""
    buffer = b""
    async for chunk in response.aiter_bytes():
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            yield event + b"\n\n"
    if buffer.strip():
        yield buffer
