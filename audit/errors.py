"""Domain errors of audit export, digests and verification, each with a stable code.

Free of Django: the offline verifier raises the verification ones.
"""

from __future__ import annotations

from controlplane.errors import Conflict, DomainError, NotFound, ValidationFailed

# --- Export requests ----------------------------------------------------------------------


class UnknownExportFormat(ValidationFailed):
    code = "unknown_export_format"


class InvalidTimeRange(ValidationFailed):
    code = "invalid_time_range"


class InvalidExportFilter(ValidationFailed):
    code = "invalid_export_filter"


class UnknownTenant(ValidationFailed):
    """A platform export names a tenant that does not exist."""

    code = "unknown_tenant"


class ExportNotFound(NotFound):
    code = "not_found"


class ExportNotReady(Conflict):
    """The export has not succeeded (yet): nothing to download."""

    code = "export_not_ready"


class ExportFileMissing(DomainError):
    """The export succeeded but its file is gone (removed by retention or by hand)."""

    code = "export_file_missing"
    http_status = 410


class IdempotencyKeyReused(Conflict):
    """The Idempotency-Key was used before for a different export request."""

    code = "idempotency_key_reused"


# --- Signing keys -------------------------------------------------------------------------


class SigningKeyMissing(DomainError):
    """No signing key is configured and none may be generated (production)."""

    code = "signing_key_missing"
    http_status = 503


class SigningKeyConflict(DomainError):
    """The configured key id is already registered with a different public key."""

    code = "signing_key_conflict"
    http_status = 503


# --- Offline verification -----------------------------------------------------------------


class VerificationError(DomainError):
    """The verifier could not run (as opposed to finding the export tampered)."""

    code = "verification_error"


class PublicKeyMissing(VerificationError):
    code = "public_key_missing"


class PublicKeyInvalid(VerificationError):
    code = "public_key_invalid"


class PublicKeyMismatch(VerificationError):
    """None of the given public keys is the one the export names as its signer."""

    code = "public_key_mismatch"


class BundleUnreadable(VerificationError):
    code = "bundle_unreadable"
