"""WebSocket routes."""

from __future__ import annotations

from django.urls import path

from frontend.consumers import PlatformEventsConsumer, TenantLiveConsumer

websocket_urlpatterns = [
    path("ws/platform/events", PlatformEventsConsumer.as_asgi()),
    path("ws/t/<slug:tenant>/live", TenantLiveConsumer.as_asgi()),
]
