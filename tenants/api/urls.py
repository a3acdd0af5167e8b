"""Tenant and platform IAM routes."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from tenants.api import views

T = "tenants/<slug:tenant>"

router = SimpleRouter(trailing_slash=False, use_regex_path=False)
router.register("platform/tenants", views.PlatformTenantViewSet, basename="platform-tenant")
router.register(
    "platform/principals", views.PlatformPrincipalViewSet, basename="platform-principal"
)
router.register(f"{T}/roles", views.RoleViewSet, basename="tenant-role")
router.register(
    f"{T}/service-accounts", views.ServiceAccountViewSet, basename="tenant-service-account"
)
router.register(f"{T}/keys", views.ApiKeyViewSet, basename="tenant-key")

urlpatterns = [
    # Singletons (the tenant itself, its IAM policy): read at the collection's own URL,
    # which a router reserves for list/create, so they keep explicit routes.
    path(f"{T}", views.TenantSelfViewSet.as_view({"get": "retrieve"}), name="tenant-detail"),
    path(
        f"{T}/cache-salt/rotate",
        views.TenantSelfViewSet.as_view({"post": "rotate_cache_salt"}),
        name="tenant-rotate-salt",
    ),
    path(
        f"{T}/iam-policy",
        views.PolicyViewSet.as_view({"get": "retrieve", "put": "replace"}),
        name="tenant-policy",
    ),
    path(
        f"{T}/iam-policy/test-permissions",
        views.PolicyViewSet.as_view({"post": "test_permissions"}),
        name="tenant-policy-test",
    ),
    *router.urls,
]
