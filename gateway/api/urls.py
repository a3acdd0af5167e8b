"""Gateway routes: tenant rate limits and provider credentials."""

from __future__ import annotations

from django.urls import path

from gateway.api import views

T = "tenants/<slug:tenant>"

urlpatterns = [
    path(
        f"{T}/rate-limits",
        views.RateLimitViewSet.as_view({"get": "list", "post": "create"}),
        name="tenant-rate-limit-list",
    ),
    path(
        f"{T}/rate-limits/<str:pk>",
        views.RateLimitViewSet.as_view(
            {"get": "retrieve", "patch": "partial_update", "delete": "destroy"}
        ),
        name="tenant-rate-limit-detail",
    ),
    path(
        f"{T}/provider-credentials",
        views.ProviderCredentialViewSet.as_view({"get": "list"}),
        name="tenant-provider-credential-list",
    ),
    path(
        f"{T}/provider-credentials/<str:provider>",
        views.ProviderCredentialViewSet.as_view(
            {
                "get": "retrieve",
                "put": "update",
                "patch": "partial_update",
                "delete": "destroy",
            }
        ),
        name="tenant-provider-credential-detail",
    ),
]
