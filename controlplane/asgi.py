"""ASGI entry point: Django over HTTP, Channels consumers over WebSocket."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

# Django must be set up before consumers (and their models) are imported.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from controlplane.ws_origin import SameOriginValidator  # noqa: E402
from frontend.routing import websocket_urlpatterns  # noqa: E402
from gateway.app import app as gateway_app  # noqa: E402
from gateway.app import lifespan  # noqa: E402

GATEWAY_PREFIX = "/v1/"


async def http_router(
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[Mapping[str, Any]], Awaitable[None]],
) -> None:
    """The OpenAI-compatible data plane (``/v1/...``) bypasses Django's middleware stack;
    everything else is the Django control plane."""
    if scope["path"].startswith(GATEWAY_PREFIX):
        await gateway_app(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_router,
        # The gateway's worker connections are closed on shutdown (gateway.app.lifespan).
        "lifespan": lifespan,
        # Origin checked with its port (channels' validator ignores it), then ALLOWED_HOSTS.
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
