"""Platform routes: the price book (model prices and GPU pool prices)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
)
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors
from billing.api import serializers as s
from billing.api.views._common import _ById
from billing.models import ModelPrice, PoolPrice
from billing.services import prices as price_services
from billing.services.price_rates import MODEL_ALL_FIELDS, POOL_FIELDS
from controlplane.api.tenancy import PlatformMixin
from controlplane.api.validation import validated


def _rates(data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    rates = {name: data.get(name) for name in names if name in data}
    if "time_discounts" in rates:
        rates["time_discounts"] = [dict(w) for w in rates["time_discounts"] or []]
    return rates


_MODEL_RATE_NAMES = MODEL_ALL_FIELDS


@extend_schema(tags=["billing-platform"])
class PlatformModelPriceViewSet(PlatformMixin, viewsets.GenericViewSet[ModelPrice]):
    """Per-token prices per (provider, model): versioned, effective-dated, never rewritten."""

    audit_entity = "billing.price"
    action_permissions = {
        "list": "tenants.list",
        "retrieve": "tenants.list",
        "create": "prices.manage",
        "correct": "prices.manage",
    }
    queryset = ModelPrice.objects.none()
    serializer_class = s.ModelPriceOut
    pagination_class = _ById
    lookup_value_converter = "int"

    def get_queryset(self) -> QuerySet[ModelPrice]:
        return selectors.model_price_list(
            provider=self.request.query_params.get("provider") or None,
            model=self.request.query_params.get("model") or None,
        )

    @extend_schema(
        parameters=[OpenApiParameter("provider", str), OpenApiParameter("model", str)],
        responses={200: s.ModelPriceOut(many=True)},
    )
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.ModelPriceOut(page, many=True).data)

    def retrieve(self, request: Request, pk: int) -> Response:
        return Response(s.ModelPriceOut(self.get_object()).data)

    @extend_schema(request=s.ModelPriceCreateInput, responses={201: s.ModelPriceOut})
    def create(self, request: Request) -> Response:
        data = validated(s.ModelPriceCreateInput, request.data)
        price = price_services.model_price_create(
            actor=self.actor(),
            provider=data["provider"],
            model=data["model"],
            rates=_rates(data, _MODEL_RATE_NAMES),
            source=data["source"],
            effective_from=data.get("effective_from"),
            effective_to=data.get("effective_to"),
            note=data.get("note", ""),
        )
        return Response(s.ModelPriceOut(price).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.ModelPriceCorrectInput, responses={201: s.ModelPriceOut})
    @action(detail=True, methods=["post"])
    def correct(self, request: Request, pk: int) -> Response:
        data = validated(s.ModelPriceCorrectInput, request.data)
        price = price_services.model_price_correct(
            actor=self.actor(),
            price=self.get_object(),
            rates=_rates(data, _MODEL_RATE_NAMES),
            source=data["source"],
            note=data.get("note", ""),
        )
        return Response(s.ModelPriceOut(price).data, status=status.HTTP_201_CREATED)


@extend_schema(tags=["billing-platform"])
class PlatformPoolPriceViewSet(PlatformMixin, viewsets.GenericViewSet[PoolPrice]):
    """GPU-hour prices of self-hosted worker pools (keyed by pool name), versioned."""

    audit_entity = "billing.pool_price"
    action_permissions = PlatformModelPriceViewSet.action_permissions
    queryset = PoolPrice.objects.none()
    serializer_class = s.PoolPriceOut
    pagination_class = _ById
    lookup_value_converter = "int"

    def get_queryset(self) -> QuerySet[PoolPrice]:
        return selectors.pool_price_list(pool=self.request.query_params.get("pool") or None)

    @extend_schema(
        parameters=[OpenApiParameter("pool", str)], responses={200: s.PoolPriceOut(many=True)}
    )
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.PoolPriceOut(page, many=True).data)

    def retrieve(self, request: Request, pk: int) -> Response:
        return Response(s.PoolPriceOut(self.get_object()).data)

    @extend_schema(request=s.PoolPriceCreateInput, responses={201: s.PoolPriceOut})
    def create(self, request: Request) -> Response:
        data = validated(s.PoolPriceCreateInput, request.data)
        price = price_services.pool_price_create(
            actor=self.actor(),
            pool=data["pool"],
            rates=_rates(data, POOL_FIELDS),
            source=data["source"],
            effective_from=data.get("effective_from"),
            effective_to=data.get("effective_to"),
            note=data.get("note", ""),
        )
        return Response(s.PoolPriceOut(price).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.PoolRatesInput, responses={201: s.PoolPriceOut})
    @action(detail=True, methods=["post"])
    def correct(self, request: Request, pk: int) -> Response:
        data = validated(s.PoolRatesInput, request.data)
        price = price_services.pool_price_correct(
            actor=self.actor(),
            price=self.get_object(),
            rates=_rates(data, POOL_FIELDS),
            source=data["source"],
            note=data.get("note", ""),
        )
        return Response(s.PoolPriceOut(price).data, status=status.HTTP_201_CREATED)
