"""Structured JSON logs that carry the request id."""

from __future__ import annotations

import logging

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

from controlplane.request_context import get_request_id


class RequestIdFilter(logging.Filter):
    """Attach the current request id (or "-") to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = get_request_id() or "-"
        return True


class JsonFormatter(_BaseJsonFormatter):
    """One JSON object per line; timestamps in UTC ISO 8601."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")
