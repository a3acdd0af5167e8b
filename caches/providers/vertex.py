"""Vertex AI context caches through google-genai (``client.caches.*``).

One client per (project, location, credentials) and timeout. Each remote cache carries our
display name ``<prefix><cache id>``: a retried creation first looks for it, so an operation
retried after a crash or a lost reply adopts the cache it already made instead of paying for
a second one (a first attempt creates at once: listing the whole scope on every create is
a round trip, and a page walk, that only a retry needs).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from functools import cache, partial
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings

from caches.content import CacheContent
from caches.providers.base import (
    PermanentProviderError,
    RemoteGone,
    RemoteListing,
    RemoteState,
    TransientProviderError,
)

if TYPE_CHECKING:
    from google import genai
    from google.genai import types as genai_types

    from caches.models import CacheObject

_MIN_TOKENS = re.compile(r"cached content is of (\d+) tokens.*minimum token count.*is (\d+)", re.I)
_TRANSIENT_CODES = {408, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class VertexScope:
    """Where a tenant's caches live: its own project, or the deployment default."""

    project: str
    location: str
    credentials_file: str = ""


_T = TypeVar("_T")
_clients: dict[tuple[VertexScope, float], genai.Client] = {}
_clients_lock = threading.Lock()


def vertex_client(scope: VertexScope, *, timeout_seconds: float | None = None) -> genai.Client:
    """A cached genai client for ``scope`` (credentials from file, static token, or ADC).

    ``timeout_seconds`` is the per-request timeout: cache operations use the provider
    timeout (the default), the gateway its own upstream timeout, so each gets a client.
    """
    timeout = timeout_seconds or settings.CACHEPLANE_PROVIDER_TIMEOUT_SECONDS
    with _clients_lock:
        client = _clients.get((scope, timeout))
        if client is None:
            client = _build_client(scope, timeout)
            _clients[(scope, timeout)] = client
        return client


@cache
def transport_error_types() -> tuple[type[BaseException], ...]:
    """What google-genai lets through when a request got no answer at all.

    The SDK raises its transport's own exceptions, not an ``APIError``: the sync client
    defaults to httpx2 (a fork whose classes are not httpx's), the async one to aiohttp
    (``ServerDisconnectedError`` is no ``OSError``), and a token refresh raises google-auth's
    ``TransportError``. Every one of them is transient for us.
    """
    import aiohttp
    import google.auth.exceptions
    import httpx

    found: list[type[BaseException]] = [
        httpx.TransportError,
        aiohttp.ClientConnectionError,
        aiohttp.ClientPayloadError,
        google.auth.exceptions.TransportError,
        OSError,  # TimeoutError, asyncio.TimeoutError and requests' errors among them
    ]
    try:
        import httpx2  # type: ignore[import-not-found,unused-ignore]

        found.append(httpx2.TransportError)
    except ImportError:  # an SDK built without httpx2 uses httpx
        pass
    return tuple(found)


@cache
def timeout_error_types() -> tuple[type[BaseException], ...]:
    """The transport errors that mean "no answer in time" (a 504, not a 502)."""
    import httpx

    found: list[type[BaseException]] = [httpx.TimeoutException, TimeoutError]
    try:
        import httpx2  # type: ignore[import-not-found,unused-ignore]

        found.append(httpx2.TimeoutException)
    except ImportError:
        pass
    return tuple(found)


def _build_client(scope: VertexScope, timeout_seconds: float) -> genai.Client:
    from google import genai
    from google.genai import types

    credentials = None
    if scope.credentials_file:
        from google.oauth2 import service_account

        credentials = service_account.Credentials.from_service_account_file(
            scope.credentials_file, scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
    elif settings.CACHEPLANE_VERTEX_STATIC_TOKEN:
        import google.oauth2.credentials

        credentials = google.oauth2.credentials.Credentials(
            token=settings.CACHEPLANE_VERTEX_STATIC_TOKEN
        )
    # One request per call: retries belong to the operation row and its Celery task
    # (controlplane.celery.TRANSIENT_RETRY_POLICY); the gateway passes 429/503 and
    # Retry-After to its client. attempts=1 also turns off the SDK's implicit retry of
    # connection errors, which applies when no retry options are given.
    retry = types.HttpRetryOptions(attempts=1)
    http_options = types.HttpOptions(
        api_version=settings.CACHEPLANE_VERTEX_API_VERSION,
        timeout=int(timeout_seconds * 1000),
        retry_options=retry,
        base_url=settings.CACHEPLANE_VERTEX_BASE_URL or None,
    )
    return genai.Client(
        vertexai=True,
        project=scope.project,
        location=scope.location,
        credentials=credentials,
        http_options=http_options,
    )


def forget_clients() -> None:
    """Drop cached clients (after settings or credentials change) and close them.

    Closes each client's synchronous connection pool. The async pools (``client.aio``, one
    per event loop, used by the gateway) live as long as the gateway process: closing one
    needs its own loop.
    """
    with _clients_lock:
        dropped = list(_clients.values())
        _clients.clear()
    for client in dropped:
        client.close()


def display_name(cache: CacheObject) -> str:
    return f"{settings.CACHEPLANE_VERTEX_DISPLAY_PREFIX}{cache.pk}"


def _translate(exc: Exception) -> Exception:
    """Map google-genai and transport errors onto our taxonomy."""
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        message = exc.message or str(exc)
        if exc.code in _TRANSIENT_CODES:
            return TransientProviderError(f"Vertex AI {exc.code} {exc.status}: {message}")
        if exc.code == 404:
            return RemoteGone(f"Vertex AI: {message}")
        if exc.code == 400 and (match := _MIN_TOKENS.search(message)):
            return PermanentProviderError(
                f"The content has {match.group(1)} tokens; the model's minimum to cache is "
                f"{match.group(2)}.",
                code="below_minimum_tokens",
            )
        if exc.code in (401, 403):
            return PermanentProviderError(f"Vertex AI refused: {message}", code="provider_denied")
        return PermanentProviderError(
            f"Vertex AI {exc.code} {exc.status}: {message}", code="provider_rejected"
        )
    if isinstance(exc, transport_error_types()):
        return TransientProviderError(f"Vertex AI unreachable: {type(exc).__name__}: {exc}")
    return exc


def _content_config(content: CacheContent) -> dict[str, Any]:
    """The cache content as google-genai types (the SDK serializes them to the wire)."""
    from google.genai import types

    canonical = content.canonical()
    parts = []
    for doc in canonical.documents:
        if doc.uri:
            parts.append(types.Part.from_uri(file_uri=doc.uri, mime_type=doc.mime_type))
        else:
            parts.append(
                types.Part(text=f'<document id="{doc.id}" chunk="{doc.chunk}">\n{doc.text}')
            )
    config: dict[str, Any] = {}
    if parts:
        config["contents"] = [types.Content(role="user", parts=parts)]
    if canonical.system_instruction:
        config["system_instruction"] = types.Content(
            parts=[types.Part(text=canonical.system_instruction)]
        )
    if canonical.tools:
        declarations = [
            types.FunctionDeclaration(
                name=t.name,
                description=t.description or None,
                parameters_json_schema=t.parameters or None,
            )
            for t in canonical.tools
        ]
        config["tools"] = [types.Tool(function_declarations=declarations)]
    return config


def _remote_state(remote: genai_types.CachedContent) -> RemoteState:
    expire = remote.expire_time
    if expire is not None and expire.tzinfo is None:
        expire = expire.replace(tzinfo=UTC)
    usage = remote.usage_metadata
    return RemoteState(
        remote_name=remote.name or "",
        token_count=usage.total_token_count if usage else None,
        expire_at=expire,
    )


class VertexProvider:
    """Create, refresh (extend TTL) and delete Vertex cached contents."""

    def __init__(self, scope: VertexScope) -> None:
        self.scope = scope

    @property
    def client(self) -> genai.Client:
        return vertex_client(self.scope)

    def find(self, cache: CacheObject) -> RemoteState | None:
        """The remote cache made for ``cache`` if one exists (found by display name)."""
        wanted = display_name(cache)
        for listing in self.list_ours():
            if listing.display_name == wanted:
                name = listing.remote_name
                remote = self._call(partial(self.client.caches.get, name=name))
                return _remote_state(remote)
        return None

    def create(self, cache: CacheObject, *, retry: bool = False) -> RemoteState:
        """Create the remote cache; a ``retry`` (an earlier attempt may have made it)
        adopts the one carrying our display name instead."""
        if retry and (existing := self.find(cache)) is not None:
            return existing
        config = _content_config(CacheContent.from_dict(cache.content))
        config["display_name"] = display_name(cache)
        config["ttl"] = f"{cache.ttl_seconds}s"
        # The SDK validates a dict holding its own pydantic types (Content, Tool); the stubs'
        # CreateCachedContentConfigDict only admits their dict forms.
        remote = self._call(
            lambda: self.client.caches.create(model=cache.model, config=config)  # type: ignore[arg-type]
        )
        return _remote_state(remote)

    def refresh(self, cache: CacheObject, *, ttl_seconds: int) -> RemoteState:
        if not cache.remote_name:
            raise RemoteGone("The cache has no remote resource.")
        remote = self._call(
            lambda: self.client.caches.update(
                name=cache.remote_name, config={"ttl": f"{ttl_seconds}s"}
            )
        )
        return _remote_state(remote)

    def evict(self, cache: CacheObject) -> None:
        if cache.remote_name:
            self.delete_remote(cache.remote_name)  # already gone is the goal state too

    def delete_remote(self, remote_name: str) -> None:
        """Delete a remote cache by name (orphans found by reconciliation)."""
        try:
            self._call(lambda: self.client.caches.delete(name=remote_name))
        except RemoteGone:
            return

    def list_ours(self) -> list[RemoteListing]:
        """Every remote cache in the scope carrying our display-name prefix."""
        prefix = settings.CACHEPLANE_VERTEX_DISPLAY_PREFIX
        pager = self._call(lambda: self.client.caches.list(config={"page_size": 1000}))
        found = []
        for remote in self._call(lambda: list(pager)):
            if (remote.display_name or "").startswith(prefix):
                state = _remote_state(remote)
                # A listed cache always has a name, and this one a display name (the prefix).
                found.append(
                    RemoteListing(remote.name or "", remote.display_name or "", state.expire_at)
                )
        return found

    @staticmethod
    def _call(fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except Exception as exc:
            translated = _translate(exc)
            if translated is exc:
                raise
            raise translated from exc
