"""Domain errors: what services raise, each with a stable machine-readable code.

Services never raise HTTP exceptions; one handler (``controlplane.api.errors``) maps
these to responses, so the same rule gives the same error over REST, the console and
the gateway.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base class: ``code`` is stable and documented, ``message`` is for humans."""

    code = "error"
    http_status = 400

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class ValidationFailed(DomainError):
    """Input is well-formed JSON but breaks a rule."""

    code = "invalid_input"
    http_status = 400


class NotFound(DomainError):
    """The object does not exist, or the caller may not know that it exists."""

    code = "not_found"
    http_status = 404


class PermissionDenied(DomainError):
    """The caller is known but lacks a permission at this scope."""

    code = "permission_denied"
    http_status = 403


class Conflict(DomainError):
    """The request conflicts with the current state (stale etag, duplicate name...)."""

    code = "conflict"
    http_status = 409
