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
        "platform/console/summary",
        PlatformConsoleViewSet.as_view({"get": "summary"}),
        name="platform-console-summary",
    ),
]
