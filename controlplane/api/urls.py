"""The versioned REST API: every app's routes plus the OpenAPI schema."""

from __future__ import annotations

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny

urlpatterns = [
    # The schema is public: it describes the API, it reveals no tenant data.
    path(
        "schema",
        SpectacularAPIView.as_view(permission_classes=[AllowAny], authentication_classes=[]),
        name="openapi-schema",
    ),
    path("", include("tenants.api.urls")),
    path("", include("identity.api.urls")),
    path("", include("audit.api.urls")),
    path("", include("caches.api.urls")),
    path("", include("frontend.api.urls")),
    path("", include("billing.api.urls")),
    path("", include("gateway.api.urls")),
    path("", include("workers.api.urls")),
]
