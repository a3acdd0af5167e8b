"""Console snapshot routes (DRF router; each endpoint an ``@action`` of its viewset)."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from frontend.api.views import PlatformConsoleViewSet, TenantConsoleViewSet

router = SimpleRouter(trailing_slash=False, use_regex_path=False)
router.register("tenants/<slug:tenant>/console", TenantConsoleViewSet, basename="tenant-console")
router.register("platform/console", PlatformConsoleViewSet, basename="platform-console")

urlpatterns = router.urls
