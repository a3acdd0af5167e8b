"""The REST API's JSON parser: the shared strict reader, bounded in size and depth.

DRF's stock ``JSONParser`` hands the stream to ``json.load``: deeply nested documents
raise ``RecursionError`` (a 500), ``NaN`` and ``Infinity`` pass, and NUL characters or
lone surrogates reach PostgreSQL or the renderer and fail there (500s). This parser reads
at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes (a chunked body has no Content-Length for
``BodySizeLimitMiddleware`` to check) and decodes with ``controlplane.strict_json``, so
every bad body is a 400 ``invalid_json`` (or a 413 ``payload_too_large``) before a view
sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser

from controlplane.strict_json import StrictJsonError, loads_strict


class InvalidJsonBody(exceptions.ParseError):
    """400 ``invalid_json``: the body is not JSON we accept."""

    error_code = "invalid_json"


class PayloadTooLarge(exceptions.APIException):
    """413 ``payload_too_large``: the body is over the configured limit."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    error_code = "payload_too_large"


#: Chunks read from the stream at a time while enforcing the size limit.
_CHUNK = 64 * 1024


def read_bounded(stream: Any, *, limit: int | None) -> bytes:
    """Read the whole stream, refusing it as soon as it passes ``limit`` bytes."""
    if stream is None:
        return b""
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if limit is not None and size > limit:
            raise PayloadTooLarge(f"The request body exceeds the limit of {limit} bytes.")
        parts.append(chunk)
    return b"".join(parts)


class StrictJSONParser(JSONParser):
    """``application/json`` bodies through ``loads_strict`` (depth, NUL, surrogates, NaN)."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        raw = read_bounded(stream, limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        if not raw.strip():
            # DRF treats an empty body as "no data"; so do we (not an error).
            return {}
        try:
            return loads_strict(raw)
        except StrictJsonError as exc:
            raise InvalidJsonBody(exc.message) from None
