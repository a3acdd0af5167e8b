"""JSON snapshots the console re-fetches on every (re)connect (same data as the pages)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from caches import selectors as cache_selectors
from caches.errors import CacheNotFound
from controlplane.api.tenancy import MEMBER, PlatformMixin, TenantScopedMixin
from frontend import selectors
from tenants.models import Principal
from workers import kv_pressure

SERIES_PARAMETERS = [
    OpenApiParameter("range", str, enum=list(selectors.RANGES)),
    OpenApiParameter(
        "since", OpenApiTypes.DATETIME, description="Custom range start (with until)."
    ),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="Custom range end (with since)."),
]


def _series(request: Request, *, tenant_ids: list[Any] | None) -> dict[str, Any]:
    params = request.query_params
    custom = selectors.custom_range(since=params.get("since", ""), until=params.get("until", ""))
    since, until = custom if custom else (None, None)
    return selectors.usage_series(
        tenant_ids=tenant_ids, range_key=params.get("range", "1h"), since=since, until=until
    )


@extend_schema(tags=["console"])
# No model behind it (snapshots assembled by the console's selectors), hence Any.
class TenantConsoleViewSet(TenantScopedMixin, viewsets.GenericViewSet[Any]):
    """The tenant page's data, filtered by the caller's permissions."""

    audit_entity = "frontend.console"
    action_permissions = {"summary": MEMBER, "cache": "caches.get", "series": "usage.get"}

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["get"], url_path="summary", url_name="summary")
    def summary(self, request: Request, tenant: str) -> Response:
        principal = request.user
        if not isinstance(principal, Principal):  # admitted callers are principals
            raise NotAuthenticated()
        return Response(selectors.tenant_summary(tenant=self.tenant, principal=principal))

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["get"], url_path="caches/<str:pk>", url_name="cache")
    def cache(self, request: Request, tenant: str, pk: str) -> Response:
        cache = cache_selectors.cache_get(tenant=self.tenant, cache_id=pk)
        if cache is None:
            raise CacheNotFound("No such cache.")
        return Response(selectors.cache_detail(tenant=self.tenant, cache=cache))

    @extend_schema(parameters=SERIES_PARAMETERS, responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["get"], url_path="series", url_name="series")
    def series(self, request: Request, tenant: str) -> Response:
        """Hit rate, requests, spend and savings per bucket, from the rollups: a named
        range, or a custom ``since``/``until`` (400 ``invalid_range`` when malformed)."""
        return Response(_series(request, tenant_ids=[self.tenant.pk]))


@extend_schema(tags=["console"])
# No model behind it (snapshots assembled by the console's selectors), hence Any.
class PlatformConsoleViewSet(PlatformMixin, viewsets.GenericViewSet[Any]):
    """The platform overview's data."""

    audit_entity = "frontend.console"
    action_permissions = {
        "summary": "tenants.list",
        "series": "tenants.list",
        "kv_series": "tenants.list",
    }

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["get"], url_path="summary", url_name="summary")
    def summary(self, request: Request) -> Response:
        page = request.query_params.get("page", "1")
        return Response(selectors.platform_summary(page=int(page) if page.isdigit() else 1))

    @extend_schema(parameters=SERIES_PARAMETERS, responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["get"], url_path="series", url_name="series")
    def series(self, request: Request) -> Response:
        """The fleet's series (every tenant: platform principals only)."""
        return Response(_series(request, tenant_ids=None))

    @extend_schema(
        parameters=[OpenApiParameter("range", str, enum=list(kv_pressure.RANGES))],
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=False, methods=["get"], url_path="kv-series", url_name="kv-series")
    def kv_series(self, request: Request) -> Response:
        """KV memory pressure per worker (peak and mean per bucket), from the stored
        per-minute samples the worker probe writes, with the 85 % line."""
        return Response(
            kv_pressure.worker_kv_series(range_key=request.query_params.get("range", "1h"))
        )
