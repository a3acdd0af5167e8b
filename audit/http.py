"""HTTP adapters that turn session-level refusals into audit rows, then answer as usual.

- ``csrf_failure``: Django's ``CSRF_FAILURE_VIEW`` for console forms; audits the denial
  and renders Django's standard page (template ``403_csrf.html``).
- ``CsrfAuditedSessionAuthentication``: DRF's session authentication, whose CSRF check
  bypasses ``CSRF_FAILURE_VIEW``; audits the denial and raises DRF's usual 403.
- ``LoginThrottleBackend`` and ``login_lockout_response``: django-axes wiring for the
  console login (failed attempts counted per username and source IP in PostgreSQL).
"""

from __future__ import annotations

import logging
from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.csrf import csrf_failure as django_csrf_failure
from drf_spectacular.authentication import SessionScheme
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request

from audit.services.sessions import csrf_failure_record
from tenants.actor import Actor, client_ip
from tenants.models import Principal

logger = logging.getLogger(__name__)


def _audit_csrf(request: HttpRequest, *, surface: str, reason: str) -> None:
    csrf_failure_record(
        actor=Actor.from_request(request),
        surface=surface,
        method=request.method or "",
        path=request.path,
        reason=reason,
        origin=request.headers.get("Origin", ""),
        referer=request.headers.get("Referer", ""),
    )


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Audit a refused console request, then render Django's standard CSRF failure."""
    _audit_csrf(request, surface="console", reason=reason)
    return django_csrf_failure(request, reason=reason)


class CsrfAuditedSessionAuthentication(SessionAuthentication):
    """DRF session authentication whose CSRF refusals are audited."""

    def enforce_csrf(self, request: Request) -> None:
        try:
            super().enforce_csrf(request)
        except exceptions.PermissionDenied as denied:
            _audit_csrf(request._request, surface="api", reason=str(denied.detail))
            raise


# django-axes ships no type information, so its backend is Any to mypy.
class LoginThrottleBackend(AxesStandaloneBackend):  # type: ignore[misc]
    """django-axes' lockout check, skipped for calls that carry no request.

    Every HTTP login path (the console's LoginView, the admin) passes the request; only
    in-process callers (``Client.login`` in tests, a shell) do not, and those have no
    source to throttle. axes itself would raise instead of authenticating them.
    """

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Principal | None:
        if request is None:
            return None
        from tenants.services.failures import login_source_lockout_seconds

        if login_source_lockout_seconds(source_ip=client_ip(request)):
            # The source is locked by its failures across usernames: no backend may try.
            raise PermissionDenied("too many failed logins from this address")
        principal: Principal | None = super().authenticate(
            request, username=username, password=password, **kwargs
        )
        return principal


def login_lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """What a locked-out login gets: 429 with Retry-After (django-axes' lockout callable)."""
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    minutes = max(1, round(seconds / 60))
    response = HttpResponse(
        "Too many failed login attempts from this address for this account. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
        status=429,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(seconds)
    return response


class CsrfAuditedSessionScheme(SessionScheme):
    """Documents the subclass in the OpenAPI schema as the same ``cookieAuth`` scheme."""

    target_class = "audit.http.CsrfAuditedSessionAuthentication"
    priority = 0
