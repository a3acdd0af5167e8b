"""Shared plumbing of the billing views: pagination, the date range, ids, parameters."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
)
from rest_framework import serializers
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

from billing.api import serializers as s
from billing.errors import InvalidRange
from controlplane.api.validation import validated
from controlplane.errors import NotFound

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
