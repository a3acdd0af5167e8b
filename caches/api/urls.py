"""Cache routes under /api/v1/tenants/{tenant}/caches."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from caches.api.views import CacheViewSet

router = SimpleRouter(trailing_slash=False, use_regex_path=False)
router.register("tenants/<slug:tenant>/caches", CacheViewSet, basename="tenant-cache")

urlpatterns = router.urls
