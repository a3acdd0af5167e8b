"""Talking to vLLM-protocol workers: one pooled async HTTP client, SSE pass-through."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from django.conf import settings

_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    """The process's pooled client (created on first use, on the serving event loop)."""
    global _client
    if _client is None:
        timeout = httpx.Timeout(settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS, connect=5.0)
        _client = httpx.AsyncClient(
            timeout=timeout,
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
        )
    return _client


async def reset_client() -> None:
    global _client
    if _client is not None:
        await _client.aclose()
        _client = None


def parse_sse_event(event: bytes) -> dict[str, Any] | None:
    """The JSON of one ``data:`` event (None for ``[DONE]`` and non-data lines)."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return None
            try:
                return json.loads(payload)
            except ValueError:
                return None
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
