"""Audit routes: tenant event search and exports, platform exports, public signing keys."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from audit.api import views

T = "tenants/<slug:tenant>/audit"

router = SimpleRouter(trailing_slash=False, use_regex_path=False)
router.register(f"{T}/events", views.TenantAuditEventViewSet, basename="tenant-audit-event")
router.register(f"{T}/exports", views.TenantAuditExportViewSet, basename="tenant-audit-export")
router.register(
    "platform/audit/exports", views.PlatformAuditExportViewSet, basename="platform-audit-export"
)

urlpatterns = [
    # A plain APIView (one public GET), not a viewset: nothing for a router to route.
    path("audit/signing-keys", views.AuditSigningKeyView.as_view(), name="audit-signing-keys"),
    *router.urls,
]
