"""Cursor pagination for every list endpoint (stable under concurrent inserts).

A cursor is opaque base64 that the client hands back; a crafted one must be a 400
``invalid_cursor``, never a 404 (DRF's default) or a 500 (a position that is not a
timestamp fails in the ORM, a NUL fails in PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.db.models import QuerySet
from rest_framework import exceptions
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.views import APIView

from controlplane.strict_json import StrictJsonError, check_value

_Row = TypeVar("_Row")


class InvalidCursor(exceptions.ParseError):
    """400 ``invalid_cursor``: the cursor was not one this API issued."""

    error_code = "invalid_cursor"
    default_detail = "Invalid cursor."


class DefaultCursorPagination(CursorPagination):
    """Newest first, by creation time; page size capped so one request stays cheap."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-created_at"

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            raise InvalidCursor() from None
        if cursor is not None and cursor.position is not None:
            try:
                check_value(cursor.position)
            except StrictJsonError:
                raise InvalidCursor() from None
        return cursor

    def paginate_queryset(
        self,
        queryset: QuerySet[Any, _Row] | Sequence[_Row],
        request: Request,
        view: APIView | None = None,
    ) -> list[_Row] | None:
        # The position is compared with the ordering column; a value that column cannot
        # hold fails when the filter is built or run.
        try:
            return super().paginate_queryset(queryset, request, view)
        except (DjangoValidationError, DataError, ValueError, TypeError, OverflowError):
            raise InvalidCursor() from None
