"""Cursor pagination for every list endpoint (stable under concurrent inserts)."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class DefaultCursorPagination(CursorPagination):
    """Newest first, by creation time; page size capped so one request stays cheap."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-created_at"
