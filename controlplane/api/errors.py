"""One JSON error shape for the whole API.

``{"error": {"code": <stable string>, "message": <human text>, "details": {...},
"request_id": <id>}}``. Domain errors keep their own code; DRF's exceptions are mapped to
codes of the same style; anything unexpected is logged and answered as ``internal_error``
without leaking the exception text.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

from controlplane.errors import DomainError
from controlplane.request_context import get_request_id

logger = logging.getLogger(__name__)

_DRF_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.ParseError: "malformed_request",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "rate_limited",
    exceptions.ValidationError: "invalid_input",
}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the error envelope (also used by plain Django views and middleware)."""
    return {
        "error": {
            "code": code,
            "message": message,
            "details": details or {},
            "request_id": get_request_id(),
        }
    }


def _validation_message(detail: Any) -> str:
    if isinstance(detail, dict):
        parts = []
        for field, problems in detail.items():
            text = problems[0] if isinstance(problems, list) and problems else problems
            parts.append(f"{field}: {text}")
        return "; ".join(parts) or "Invalid input."
    if isinstance(detail, list) and detail:
        return str(detail[0])
    return str(detail)


def _audit_unauthenticated(context: dict[str, Any]) -> None:
    """A request without credentials is a denial too (coalesced per source, see
    ``tenants.services.throttling.unauthenticated_request_record``)."""
    from tenants.actor import client_ip
    from tenants.services.throttling import unauthenticated_request_record

    request = getattr(context.get("request"), "_request", None)
    if request is None:
        return
    unauthenticated_request_record(
        source_ip=client_ip(request),
        user_agent=request.headers.get("User-Agent", ""),
        entry_point="rest",
        path=request.path,
    )


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler producing the one error shape."""
    if isinstance(exc, DomainError):
        response = Response(error_body(exc.code, exc.message, exc.details), status=exc.http_status)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after:  # e.g. too_many_failures (429)
            response["Retry-After"] = str(retry_after)
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.NotAuthenticated):
        _audit_unauthenticated(context)
    if isinstance(exc, exceptions.APIException):
        code = getattr(exc, "error_code", None) or next(
            (c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error"
        )
        if isinstance(exc, exceptions.ValidationError):
            body = error_body(code, _validation_message(exc.detail), {"fields": exc.detail})
        else:
            body = error_body(code, str(exc.detail))
        response = Response(body, status=exc.status_code)
        wait = getattr(exc, "wait", None)  # Throttled sets it; the stubs do not declare it
        if isinstance(exc, exceptions.Throttled) and wait:
            response["Retry-After"] = str(int(wait))
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            response["WWW-Authenticate"] = auth_header
        return response
    logger.exception("unhandled API error", extra={"view": str(context.get("view"))})
    return Response(
        error_body("internal_error", "An internal error occurred; it has been logged."),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )
