"""Console snapshot routes."""

from __future__ import annotations

from django.urls import path

from frontend.api.views import PlatformConsoleViewSet, TenantConsoleViewSet

urlpatterns = [
    path(
        "tenants/<slug:tenant>/console/summary",
        TenantConsoleViewSet.as_view({"get": "summary"}),
        name="tenant-console-summary",
    ),
    path(
        "tenants/<slug:tenant>/console/caches/<str:pk>",
        TenantConsoleViewSet.as_view({"get": "cache"}),
        name="tenant-console-cache",
    ),
    path(
        "tenants/<slug:tenant>/console/series",
        TenantConsoleViewSet.as_view({"get": "series"}),
        name="tenant-console-series",
    ),
    path(
        "platform/console/series",
        PlatformConsoleViewSet.as_view({"get": "series"}),
        name="platform-console-series",
    ),
    path(
        "platform/console/kv-series",
        PlatformConsoleViewSet.as_view({"get": "kv_series"}),
        name="platform-console-kv-series",
    ),
    path(
        "platform/console/summary",
        PlatformConsoleViewSet.as_view({"get": "summary"}),
        name="platform-console-summary",
    ),
]
