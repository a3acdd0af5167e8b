"""Worker registry routes (platform scope)."""

from __future__ import annotations

from django.urls import path

from workers.api.views import PlatformWorkerViewSet

urlpatterns = [
    path(
        "platform/workers",
        PlatformWorkerViewSet.as_view({"post": "register"}),
        name="platform-worker-register",
    ),
    path(
        "platform/workers/<str:name>",
        PlatformWorkerViewSet.as_view({"get": "retrieve"}),
        name="platform-worker-detail",
    ),
]
