"""WebSocket handshakes only from this deployment's own pages: scheme, host *and port*.

Channels' ``AllowedHostsOriginValidator`` compares the ``Origin`` header's host name with
``ALLOWED_HOSTS`` and ignores its port, so a page served by any other service on the same
host (``http://localhost:5173``, another app on ``:8080``) could open a socket with the
user's session cookie (cross-site WebSocket hijacking). Here the Origin must be the
origin the socket was opened on (the ``Host`` header, default ports made explicit) or one
listed in ``CSRF_TRUSTED_ORIGINS`` (the same list Django's CSRF check trusts, which names
scheme and port); the host name must still pass ``ALLOWED_HOSTS`` (checked by the channels
validator this wraps). A handshake without an Origin header is refused, as channels does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import AllowedHostsOriginValidator, WebsocketDenier
from django.conf import settings

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _origin_tuple(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, the default port made explicit; None if malformed."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def origin_allowed(*, origin: str, host: str, secure: bool) -> bool:
    """Whether a page at ``origin`` may open a socket on ``host`` (the Host header)."""
    given = _origin_tuple(origin)
    if given is None:
        return False
    trusted = {_origin_tuple(o) for o in settings.CSRF_TRUSTED_ORIGINS}
    if given in trusted:
        return True
    served = _origin_tuple(f"{'https' if secure else 'http'}://{host}")
    return given == served


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin1")
    return ""


class SameOriginValidator:
    """ASGI middleware: refuse a WebSocket handshake from another origin (see module)."""

    def __init__(self, application: ASGIApp) -> None:
        self.application = AllowedHostsOriginValidator(application)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        origin = _header(scope, b"origin")
        secure = scope.get("scheme") in ("wss", "https")
        if origin and not origin_allowed(
            origin=origin, host=_header(scope, b"host"), secure=secure
        ):
            await WebsocketDenier()(scope, receive, send)
            return
        await self.application(scope, receive, send)
