"""Domain errors of tenants and IAM, each with a stable code (documented in the README)."""

from __future__ import annotations

from controlplane.errors import Conflict, NotFound, PermissionDenied, ValidationFailed


class UnknownPermission(ValidationFailed):
    code = "unknown_permission"


class UnknownRole(ValidationFailed):
    code = "unknown_role"


class UnknownPrincipal(ValidationFailed):
    code = "unknown_principal"


class EtagMismatch(Conflict):
    code = "etag_mismatch"


class LastTenantAdmin(Conflict):
    code = "last_tenant_admin"


class DuplicateName(Conflict):
    code = "duplicate_name"


class ReservedRoleName(ValidationFailed):
    """A custom role named like a built-in one (``platform.``, ``tenant.``...), any case."""

    code = "reserved_role_name"


class EscalationDenied(PermissionDenied):
    code = "escalation_denied"


class TenantSuspended(PermissionDenied):
    code = "tenant_suspended"


class TenantNotFound(NotFound):
    code = "not_found"


class InvalidExpiry(ValidationFailed):
    code = "invalid_expiry"


class ApiKeyRejected(Exception):
    """Authentication with an API key failed; ``code`` says why (stable, documented)."""

    def __init__(
        self, code: str, message: str, *, key_id: str | None = None, tenant_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.key_id = key_id
        self.tenant_id = tenant_id
