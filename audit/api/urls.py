"""Audit routes: tenant event search and exports, platform exports, public signing keys."""

from __future__ import annotations

from django.urls import path

from audit.api import views

T = "tenants/<slug:tenant>/audit"
P = "platform/audit"

urlpatterns = [
    path("audit/signing-keys", views.AuditSigningKeyView.as_view(), name="audit-signing-keys"),
    path(
        f"{T}/events",
        views.TenantAuditEventViewSet.as_view({"get": "list"}),
        name="tenant-audit-event-list",
    ),
    path(
        f"{T}/exports",
        views.TenantAuditExportViewSet.as_view({"get": "list", "post": "create"}),
        name="tenant-audit-export-list",
    ),
    path(
        f"{T}/exports/<str:pk>",
        views.TenantAuditExportViewSet.as_view({"get": "retrieve"}),
        name="tenant-audit-export-detail",
    ),
    path(
        f"{T}/exports/<str:pk>/download",
        views.TenantAuditExportViewSet.as_view({"get": "download"}),
        name="tenant-audit-export-download",
    ),
    path(
        f"{P}/exports",
        views.PlatformAuditExportViewSet.as_view({"get": "list", "post": "create"}),
        name="platform-audit-export-list",
    ),
    path(
        f"{P}/exports/<str:pk>",
        views.PlatformAuditExportViewSet.as_view({"get": "retrieve"}),
        name="platform-audit-export-detail",
    ),
    path(
        f"{P}/exports/<str:pk>/download",
        views.PlatformAuditExportViewSet.as_view({"get": "download"}),
        name="platform-audit-export-download",
    ),
]
