"""Tenant routes: usage, spend, savings, the CSV export and break-even."""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors
from billing.api import serializers as s
from billing.api.views._common import _RANGE_PARAMS, _ByOccurred, _range
from billing.models import UsageRecord
from billing.selectors.spend_export import EXPORT_COLUMNS
from billing.services import breakeven as breakeven_service
from billing.services.usage.estimates import usage_estimate_correct
from controlplane.api.tenancy import TenantScopedMixin
from controlplane.api.validation import validated


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
        # A correction changes spend: those who manage budgets make it (billing admins,
        # tenant admins, platform admins).
        "correct": "budgets.update",
    }
    serializer_class = s.UsageRecordOut
    pagination_class = _ByOccurred
    renderer_classes = [JSONRenderer, CsvRenderer]
    lookup_url_kwarg = "ledger_key"

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
    @action(detail=False, methods=["get"])
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
    @action(detail=False, methods=["get"])
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
    @action(detail=False, methods=["get"], url_path="export.csv")
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

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "ledger_key",
                OpenApiTypes.STR,
                OpenApiParameter.PATH,
                description="The row's request_id (the gateway's x-cacheplane-ledger-key).",
            )
        ],
        request=s.UsageCorrectionInput,
        responses={
            200: s.UsageRecordOut,
            400: OpenApiResponse(description="invalid_usage, invalid_input"),
            404: OpenApiResponse(description="usage_record_not_found"),
            409: OpenApiResponse(description="usage_not_estimated: the row's counts stand"),
        },
    )
    @action(detail=True, methods=["post"], url_path="correction", renderer_classes=[JSONRenderer])
    def correct(self, request: Request, tenant: str, ledger_key: str) -> Response:
        """Replace an estimated row's cost with the counts the provider reported (priced
        at the row's time; rollups and budgets move by the exact difference). Sending the
        same counts again returns the row unchanged."""
        data = validated(s.UsageCorrectionInput, request.data)
        row = usage_estimate_correct(
            tenant=self.tenant, ledger_key=ledger_key, actor=self.actor(), **data
        )
        return Response(s.UsageRecordOut(row).data)


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
