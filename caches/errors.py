"""Domain errors of cache objects (stable codes, documented in docs/caches.md)."""

from __future__ import annotations

from controlplane.errors import Conflict, NotFound, ValidationFailed


class InvalidTtl(ValidationFailed):
    code = "invalid_ttl"


class TtlBelowProviderMinimum(InvalidTtl):
    """The provider would refuse this TTL (Vertex: under 60 s)."""

    code = "ttl_below_provider_minimum"


class UnknownModel(ValidationFailed):
    code = "unknown_model"


class BelowMinimumTokens(ValidationFailed):
    code = "below_minimum_tokens"


class ContentTooLarge(ValidationFailed):
    code = "content_too_large"


class GcsUriNotAllowed(ValidationFailed):
    code = "gcs_uri_not_allowed"


class InvalidCron(ValidationFailed):
    code = "invalid_cron"


class InvalidContent(ValidationFailed):
    code = "invalid_content"


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"


class InvalidState(Conflict):
    code = "invalid_state"


class CacheNotFound(NotFound):
    code = "not_found"
