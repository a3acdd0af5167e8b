"""Billing API: thin adapters that validate input, call one service or selector, serialize.

Tenant routes need ``usage.get`` (usage, spend, savings, export, break-even),
``budgets.get`` (read budgets and alerts) or ``budgets.update`` (write budgets); the
platform price book needs ``tenants.list`` to read and ``prices.manage`` to write.
"""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers, status, viewsets
from rest_framework.pagination import CursorPagination
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors
from billing.api import serializers as s
from billing.errors import InvalidRange
from billing.models import Budget, BudgetAlert, ModelPrice, PoolPrice, UsageRecord
from billing.selectors.usage import EXPORT_COLUMNS
from billing.services import breakeven as breakeven_service
from billing.services import budget_crud as budget_services
from billing.services import prices as price_services
from controlplane.api.tenancy import PlatformMixin, TenantScopedMixin
from controlplane.api.validation import validated
from controlplane.errors import NotFound, ValidationFailed

MAX_RANGE = timedelta(days=400)


class _ById(CursorPagination):
    page_size = 100
    max_page_size = 500
    page_size_query_param = "page_size"
    ordering = "-id"


class _ByOccurred(_ById):
    ordering = "-occurred_at"


class _ByCreated(_ById):
    page_size = 50
    ordering = "-created_at"


def _range(
    request: Request, query_class: type[serializers.Serializer[None]] = s.RangeQuery
) -> dict[str, Any]:
    """since/until from the query string; defaults: the current UTC month up to now."""
    data = validated(query_class, request.query_params)
    now = timezone.now()
    data.setdefault("until", now)
    data.setdefault("since", now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    if data["since"] >= data["until"] or data["until"] - data["since"] > MAX_RANGE:
        raise InvalidRange("since must precede until, at most 400 days apart.")
    return data


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise NotFound("No such object.") from None


_RANGE_PARAMS = [
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="Default: start of month."),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="Default: now."),
]
_BUDGET_ID = OpenApiParameter("pk", OpenApiTypes.UUID, OpenApiParameter.PATH)


# --- Platform: the price book ---------------------------------------------------------


def _rates(data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    rates = {name: data.get(name) for name in names if name in data}
    if "time_discounts" in rates:
        rates["time_discounts"] = [dict(w) for w in rates["time_discounts"] or []]
    return rates


_MODEL_RATE_NAMES = price_services.MODEL_ALL_FIELDS


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
            rates=_rates(data, price_services.POOL_FIELDS),
            source=data["source"],
            effective_from=data.get("effective_from"),
            effective_to=data.get("effective_to"),
            note=data.get("note", ""),
        )
        return Response(s.PoolPriceOut(price).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.PoolRatesInput, responses={201: s.PoolPriceOut})
    def correct(self, request: Request, pk: int) -> Response:
        data = validated(s.PoolRatesInput, request.data)
        price = price_services.pool_price_correct(
            actor=self.actor(),
            price=self.get_object(),
            rates=_rates(data, price_services.POOL_FIELDS),
            source=data["source"],
            note=data.get("note", ""),
        )
        return Response(s.PoolPriceOut(price).data, status=status.HTTP_201_CREATED)


# --- Tenant: usage and spend ------------------------------------------------------------


class CsvRenderer(BaseRenderer):
    """Lets clients ask for ``text/csv``; errors on such requests are still JSON text."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        return json.dumps(data).encode() if data is not None else b""


class _Echo:
    def write(self, value: str) -> str:
        return value


@extend_schema(tags=["billing"])
class UsageViewSet(TenantScopedMixin, viewsets.GenericViewSet[UsageRecord]):
    """The tenant's usage ledger, spend by day/model/provider/cache, savings, CSV export."""

    audit_entity = "billing.usage"
    action_permissions = {
        "list": "usage.get",
        "spend": "usage.get",
        "savings": "usage.get",
        "export": "usage.get",
    }
    serializer_class = s.UsageRecordOut
    pagination_class = _ByOccurred
    renderer_classes = [JSONRenderer, CsvRenderer]

    @extend_schema(
        parameters=[
            *_RANGE_PARAMS,
            OpenApiParameter("model", str),
            OpenApiParameter("cache_id", str),
        ],
        responses={200: s.UsageRecordOut(many=True)},
    )
    def list(self, request: Request, tenant: str) -> Response:
        query = _range(request, s.UsageQuery)
        rows = selectors.usage_list(
            tenant=self.tenant,
            since=query["since"],
            until=query["until"],
            model=query.get("model"),
            cache_id=query.get("cache_id"),
        )
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(s.UsageRecordOut(page, many=True).data)

    @extend_schema(
        parameters=[
            *_RANGE_PARAMS,
            OpenApiParameter(
                "group_by", str, enum=["day", "model", "provider", "cache"], required=True
            ),
        ],
        responses={200: s.SpendOut},
    )
    def spend(self, request: Request, tenant: str) -> Response:
        query = _range(request, s.SpendQuery)
        rows = selectors.spend_grouped(
            tenant=self.tenant,
            since=query["since"],
            until=query["until"],
            group_by=query["group_by"],
        )
        body = {
            "since": query["since"],
            "until": query["until"],
            "group_by": query["group_by"],
            "rows": rows,
        }
        return Response(s.SpendOut(body).data)

    @extend_schema(parameters=_RANGE_PARAMS, responses={200: s.SavingsOut})
    def savings(self, request: Request, tenant: str) -> Response:
        query = _range(request)
        summary = selectors.savings_summary(
            tenant=self.tenant, since=query["since"], until=query["until"]
        )
        body = {"since": query["since"], "until": query["until"], **summary.__dict__}
        return Response(s.SavingsOut(body).data)

    @extend_schema(
        parameters=_RANGE_PARAMS,
        responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV")},
    )
    def export(self, request: Request, tenant: str) -> StreamingHttpResponse:
        query = _range(request)
        since, until = query["since"], query["until"]
        writer = csv.writer(_Echo())

        def lines() -> Iterator[str]:
            yield writer.writerow(EXPORT_COLUMNS)
            for row in selectors.spend_export_rows(tenant=self.tenant, since=since, until=until):
                yield writer.writerow(row)

        response = StreamingHttpResponse(
            _streamable(request, lines()), content_type="text/csv; charset=utf-8"
        )
        name = f"{self.tenant.slug}-spend-{_stamp(since)}-{_stamp(until)}.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        response["Cache-Control"] = "no-store"
        return response


def _streamable(request: Request, lines: Iterator[str]) -> Iterator[str] | AsyncIterator[str]:
    """The iterator as the server wants it: under ASGI (uvicorn) Django would buffer a
    sync iterator whole, so it gets an async one reading 1,000 lines per thread hop; the
    database cursor stays on Django's one sync thread (thread_sensitive)."""
    if not isinstance(request._request, ASGIRequest):
        return lines
    next_chunk = sync_to_async(lambda: "".join(islice(lines, 1000)), thread_sensitive=True)

    async def chunks() -> AsyncIterator[str]:
        while chunk := await next_chunk():
            yield chunk

    return chunks()


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%S")


@extend_schema(tags=["billing"])
# No model behind it (a computation over prices), hence Any.
class BreakEvenViewSet(TenantScopedMixin, viewsets.GenericViewSet[Any]):
    """Hourly cost with and without a cache and the break-even query rate."""

    audit_entity = "billing.break_even"
    action_permissions = {"create": "usage.get"}
    serializer_class = s.BreakEvenOut

    @extend_schema(request=s.BreakEvenInput, responses={200: s.BreakEvenOut})
    def create(self, request: Request, tenant: str) -> Response:
        data = validated(s.BreakEvenInput, request.data)
        result = breakeven_service.breakeven(
            provider=data["provider"],
            model=data.get("model", ""),
            pool=data.get("pool", ""),
            context_tokens=data["context_tokens"],
            queries_per_hour=data["queries_per_hour"],
            ttl=timedelta(seconds=data["ttl_seconds"]),
        )
        body = dict(result.__dict__)
        for name in ("breakeven_queries_per_hour", "breakeven_queries_per_hour_incl_create"):
            body[name] = str(body[name])
        body["blended"] = None
        if data.get("hit_ratio") is not None and data.get("input_tokens_per_day") is not None:
            body["blended"] = breakeven_service.blended_cost(
                provider=data["provider"],
                model=data.get("model", ""),
                input_tokens_per_day=data["input_tokens_per_day"],
                hit_ratio=data["hit_ratio"],
                days=data["days"],
            ).__dict__
        return Response(s.BreakEvenOut(body).data)


# --- Tenant: budgets and alerts ---------------------------------------------------------


@extend_schema(tags=["billing"])
class BudgetViewSet(TenantScopedMixin, viewsets.GenericViewSet[Budget]):
    """Budgets of this tenant (or of one of its service accounts) with their current period."""

    audit_entity = "billing.budget"
    action_permissions = {
        "list": "budgets.get",
        "retrieve": "budgets.get",
        "create": "budgets.update",
        "partial_update": "budgets.update",
        "destroy": "budgets.update",
        "rotate_secret": "budgets.update",
    }
    serializer_class = s.BudgetOut
    pagination_class = _ByCreated

    def _out(
        self,
        budgets: Budget | list[Budget],
        serializer_class: type[s.BudgetOut] = s.BudgetOut,
        many: bool = False,
    ) -> object:
        items = budgets if isinstance(budgets, list) else [budgets]
        periods = selectors.budget_current_periods(
            tenant=self.tenant, budgets=items, at=timezone.now()
        )
        return serializer_class(budgets, many=many, context={"periods": periods}).data

    def _budget(self, pk: str) -> Budget:
        budget = selectors.budget_get(tenant=self.tenant, budget_id=_uuid(pk))
        if budget is None:
            raise NotFound("No such budget.")
        return budget

    @extend_schema(responses={200: s.BudgetOut(many=True)})
    def list(self, request: Request, tenant: str) -> Response:
        page = self.paginate_queryset(selectors.budget_list(tenant=self.tenant)) or []
        return self.get_paginated_response(self._out(page, many=True))

    @extend_schema(parameters=[_BUDGET_ID], responses={200: s.BudgetOut})
    def retrieve(self, request: Request, tenant: str, pk: str) -> Response:
        return Response(self._out(self._budget(pk)))

    @extend_schema(request=s.BudgetCreateInput, responses={201: s.BudgetSecretOut})
    def create(self, request: Request, tenant: str) -> Response:
        data = validated(s.BudgetCreateInput, request.data)
        budget = budget_services.budget_create(
            actor=self.actor(),
            tenant=self.tenant,
            name=data["name"],
            period=data["period"],
            limit_micros=data["limit_micros"],
            thresholds=data.get("thresholds", list(budget_services.DEFAULT_THRESHOLDS)),
            hard_limit=data.get("hard_limit", True),
            principal_id=str(data["principal"]) if data.get("principal") else None,
            starts_at=data.get("starts_at"),
            ends_at=data.get("ends_at"),
            webhook_url=data.get("webhook_url", ""),
        )
        response = Response(self._out(budget, s.BudgetSecretOut), status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response

    @extend_schema(
        parameters=[_BUDGET_ID], request=s.BudgetUpdateInput, responses={200: s.BudgetOut}
    )
    def partial_update(self, request: Request, tenant: str, pk: str) -> Response:
        budget = self._budget(pk)
        changes = dict(validated(s.BudgetUpdateInput, request.data))
        budget = budget_services.budget_update(actor=self.actor(), budget=budget, changes=changes)
        return Response(self._out(budget))

    @extend_schema(parameters=[_BUDGET_ID], responses={204: None})
    def destroy(self, request: Request, tenant: str, pk: str) -> Response:
        budget_services.budget_archive(actor=self.actor(), budget=self._budget(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(parameters=[_BUDGET_ID], request=None, responses={200: s.BudgetSecretOut})
    def rotate_secret(self, request: Request, tenant: str, pk: str) -> Response:
        budget = budget_services.budget_rotate_secret(actor=self.actor(), budget=self._budget(pk))
        response = Response(self._out(budget, s.BudgetSecretOut))
        response["Cache-Control"] = "no-store"
        return response


@extend_schema(tags=["billing"])
class BudgetAlertViewSet(TenantScopedMixin, viewsets.GenericViewSet[BudgetAlert]):
    """Threshold alerts of this tenant's budgets, newest first."""

    audit_entity = "billing.budget_alert"
    action_permissions = {"list": "budgets.get"}
    serializer_class = s.BudgetAlertOut
    pagination_class = _ByCreated

    @extend_schema(
        parameters=[OpenApiParameter("budget", OpenApiTypes.UUID)],
        responses={200: s.BudgetAlertOut(many=True)},
    )
    def list(self, request: Request, tenant: str) -> Response:
        budget_id = request.query_params.get("budget") or None
        if budget_id is not None:
            try:
                budget_id = str(uuid.UUID(budget_id))
            except ValueError:
                raise ValidationFailed("budget must be a UUID.") from None
        alerts = selectors.budget_alert_list(tenant=self.tenant, budget_id=budget_id)
        page = self.paginate_queryset(alerts)
        return self.get_paginated_response(s.BudgetAlertOut(page, many=True).data)
