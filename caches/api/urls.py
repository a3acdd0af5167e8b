"""Cache routes under /api/v1/tenants/{tenant}/caches."""

from __future__ import annotations

from django.urls import path

from caches.api.views import CacheViewSet

T = "tenants/<slug:tenant>"

urlpatterns = [
    path(
        f"{T}/caches",
        CacheViewSet.as_view({"get": "list", "post": "create"}),
        name="tenant-cache-list",
    ),
    path(f"{T}/caches/lint", CacheViewSet.as_view({"post": "lint"}), name="tenant-cache-lint"),
    path(
        f"{T}/caches/operations/<str:op>",
        CacheViewSet.as_view({"get": "operation"}),
        name="tenant-cache-operation",
    ),
    path(
        f"{T}/caches/<str:pk>",
        CacheViewSet.as_view({"get": "retrieve"}),
        name="tenant-cache-detail",
    ),
    path(
        f"{T}/caches/<str:pk>/timeline",
        CacheViewSet.as_view({"get": "timeline"}),
        name="tenant-cache-timeline",
    ),
    path(
        f"{T}/caches/<str:pk>/extend",
        CacheViewSet.as_view({"post": "extend"}),
        name="tenant-cache-extend",
    ),
    path(
        f"{T}/caches/<str:pk>/policy",
        CacheViewSet.as_view({"post": "policy"}),
        name="tenant-cache-policy",
    ),
    path(
        f"{T}/caches/<str:pk>/evict",
        CacheViewSet.as_view({"post": "evict"}),
        name="tenant-cache-evict",
    ),
]
