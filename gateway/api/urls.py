"""Gateway routes: tenant rate limits and provider credentials."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from gateway.api import views

T = "tenants/<slug:tenant>"

router = SimpleRouter(trailing_slash=False, use_regex_path=False)
router.register(f"{T}/rate-limits", views.RateLimitViewSet, basename="tenant-rate-limit")
router.register(
    f"{T}/provider-credentials",
    views.ProviderCredentialViewSet,
    basename="tenant-provider-credential",
)

urlpatterns = router.urls
