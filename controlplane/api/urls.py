"""The versioned REST API: every app's routes plus the OpenAPI schema."""

from __future__ import annotations

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("schema", SpectacularAPIView.as_view(), name="openapi-schema"),
    path("", include("tenants.api.urls")),
]
