"""Rate-limit API: thin adapters over ``gateway.services`` and ``gateway.selectors``.

Reading needs ``budgets.get``, writing ``budgets.update`` (limits on spend and on
throughput are managed by the same people).
"""

from __future__ import annotations

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.tenancy import TenantScopedMixin
from controlplane.api.validation import validated
from gateway import selectors, services
from gateway.api import serializers as s
from gateway.models import RateLimit

_ID = OpenApiParameter("pk", OpenApiTypes.UUID, OpenApiParameter.PATH)


class _ByCreated(CursorPagination):
    page_size = 50
    max_page_size = 200
    page_size_query_param = "page_size"
    ordering = "-created_at"


@extend_schema(tags=["gateway"])
class RateLimitViewSet(TenantScopedMixin, viewsets.GenericViewSet[RateLimit]):
    """Requests/min, tokens/min, concurrency and fair-share weight, per tenant or key."""

    audit_entity = "gateway.rate_limit"
    action_permissions = {
        "list": "budgets.get",
        "retrieve": "budgets.get",
        "create": "budgets.update",
        "partial_update": "budgets.update",
        "destroy": "budgets.update",
    }
    serializer_class = s.RateLimitOut
    pagination_class = _ByCreated

    def _limit(self, pk: str) -> RateLimit:
        try:
            found = selectors.rate_limit_get(tenant=self.tenant, rate_limit_id=str(uuid.UUID(pk)))
        except ValueError:
            found = None
        if found is None:
            raise services.RateLimitNotFound("No such rate limit.")
        return found

    @extend_schema(responses={200: s.RateLimitOut(many=True)})
    def list(self, request: Request, tenant: str) -> Response:
        page = self.paginate_queryset(selectors.rate_limit_list(tenant=self.tenant))
        return self.get_paginated_response(s.RateLimitOut(page, many=True).data)

    @extend_schema(parameters=[_ID], responses={200: s.RateLimitOut})
    def retrieve(self, request: Request, tenant: str, pk: str) -> Response:
        return Response(s.RateLimitOut(self._limit(pk)).data)

    @extend_schema(request=s.RateLimitCreateInput, responses={201: s.RateLimitOut})
    def create(self, request: Request, tenant: str) -> Response:
        data = dict(validated(s.RateLimitCreateInput, request.data))
        api_key = data.pop("api_key", None)
        limit = services.rate_limit_create(
            tenant=self.tenant,
            actor=self.actor(),
            api_key_id=str(api_key) if api_key else None,
            values=data,
        )
        return Response(s.RateLimitOut(limit).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[_ID], request=s.RateLimitUpdateInput, responses={200: s.RateLimitOut}
    )
    def partial_update(self, request: Request, tenant: str, pk: str) -> Response:
        changes = dict(validated(s.RateLimitUpdateInput, request.data))
        limit = services.rate_limit_update(
            limit=self._limit(pk), actor=self.actor(), changes=changes
        )
        return Response(s.RateLimitOut(limit).data)

    @extend_schema(parameters=[_ID], responses={204: None})
    def destroy(self, request: Request, tenant: str, pk: str) -> Response:
        services.rate_limit_delete(limit=self._limit(pk), actor=self.actor())
        return Response(status=status.HTTP_204_NO_CONTENT)
