"""Worker registry routes (platform scope)."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from workers.api.views import PlatformWorkerViewSet

router = SimpleRouter(trailing_slash=False, use_regex_path=False)
router.register("platform/workers", PlatformWorkerViewSet, basename="platform-worker")

urlpatterns = [
    # Register is a create-or-update by name on the collection URL; routed as ``create`` it
    # would rename the audited action (``workers.worker.register``), so it stays explicit.
    path(
        "platform/workers",
        PlatformWorkerViewSet.as_view({"post": "register"}),
        name="platform-worker-register",
    ),
    *router.urls,
]
