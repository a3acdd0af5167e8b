"""Tenant and platform IAM routes."""

from __future__ import annotations

from django.urls import path

from tenants.api import views

T = "tenants/<slug:tenant>"

urlpatterns = [
    path(
        "platform/tenants",
        views.PlatformTenantViewSet.as_view({"get": "list", "post": "create"}),
        name="platform-tenant-list",
    ),
    path(
        "platform/tenants/<slug:slug>",
        views.PlatformTenantViewSet.as_view({"get": "retrieve", "patch": "partial_update"}),
        name="platform-tenant-detail",
    ),
    path(
        "platform/tenants/<slug:slug>/suspend",
        views.PlatformTenantViewSet.as_view({"post": "suspend"}),
        name="platform-tenant-suspend",
    ),
    path(
        "platform/tenants/<slug:slug>/resume",
        views.PlatformTenantViewSet.as_view({"post": "resume"}),
        name="platform-tenant-resume",
    ),
    path(
        "platform/principals",
        views.PlatformPrincipalViewSet.as_view({"get": "list", "post": "create"}),
        name="platform-principal-list",
    ),
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
    path(
        f"{T}/roles",
        views.RoleViewSet.as_view({"get": "list", "post": "create"}),
        name="tenant-role-list",
    ),
    path(
        f"{T}/service-accounts",
        views.ServiceAccountViewSet.as_view({"get": "list", "post": "create"}),
        name="tenant-service-account-list",
    ),
    path(
        f"{T}/keys",
        views.ApiKeyViewSet.as_view({"get": "list", "post": "create"}),
        name="tenant-key-list",
    ),
    path(
        f"{T}/keys/<str:pk>/revoke",
        views.ApiKeyViewSet.as_view({"post": "revoke"}),
        name="tenant-key-revoke",
    ),
]
