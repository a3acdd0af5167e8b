"""Validation of cache requests: TTLs, content and models, before anything is written.

Each check raises the domain error the API maps to its stable code; none writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings

from caches import catalog
from caches.content import CacheContent, gcs_bucket
from caches.errors import (
    BelowMinimumTokens,
    ContentTooLarge,
    GcsUriNotAllowed,
    InvalidContent,
    InvalidTtl,
    TtlBelowProviderMinimum,
    UnknownModel,
)
from caches.models import Provider, TenantCacheSettings
from tenants.models import Tenant

if TYPE_CHECKING:
    from caches.services.lifecycle import CacheSpec


def validate_ttl(ttl_seconds: int, *, provider: str | None = None) -> int:
    """Refuse a TTL outside the platform's range or below what ``provider`` accepts.

    Raises InvalidTtl (``invalid_ttl``) or TtlBelowProviderMinimum
    (``ttl_below_provider_minimum``), so nothing is recorded that the provider will refuse.
    """
    maximum = settings.CACHEPLANE_CACHE_MAX_TTL_SECONDS
    if ttl_seconds <= 0 or ttl_seconds > maximum:
        raise InvalidTtl(
            f"ttl_seconds must be between 1 and {maximum} (the platform maximum).",
            details={"maximum": maximum, "given": ttl_seconds},
        )
    minimum = catalog.PROVIDER_MIN_TTL_SECONDS.get(provider or "", 1)
    if ttl_seconds < minimum:
        raise TtlBelowProviderMinimum(
            f"{provider} refuses a TTL under {minimum} seconds; asked for {ttl_seconds}.",
            details={"minimum": minimum, "given": ttl_seconds, "provider": provider},
        )
    return ttl_seconds


def validate_content(tenant: Tenant, spec: CacheSpec) -> CacheContent:
    """The spec's content, parsed; raises InvalidContent, ContentTooLarge or GcsUriNotAllowed."""
    try:
        content = CacheContent.from_dict(spec.content)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidContent(f"Malformed content: {exc}") from None
    if not (content.system_instruction or content.tools or content.documents):
        raise InvalidContent("The content is empty.")
    for doc in content.documents:
        if (doc.text is None) == (doc.uri is None):
            raise InvalidContent(f"Document {doc.id}#{doc.chunk} needs exactly one of text, uri.")
    size = content.inline_bytes()
    if size > settings.CACHEPLANE_CACHE_MAX_CONTENT_BYTES:
        raise ContentTooLarge(
            f"Inline content is {size} bytes; the limit is "
            f"{settings.CACHEPLANE_CACHE_MAX_CONTENT_BYTES}. Reference large documents by "
            "gs:// URI.",
            details={"bytes": size, "limit": settings.CACHEPLANE_CACHE_MAX_CONTENT_BYTES},
        )
    uris = content.gcs_uris()
    if uris:
        if spec.provider != Provider.VERTEX:
            raise GcsUriNotAllowed("gs:// documents are supported on Vertex AI caches only.")
        own = TenantCacheSettings.objects.filter(tenant=tenant).first()
        allowed = set(own.gcs_bucket_allow_list) if own else set()
        for uri in uris:
            bucket = gcs_bucket(uri)
            if bucket is None or bucket not in allowed:
                raise GcsUriNotAllowed(
                    f"{uri!r} is not in the tenant's bucket allow-list.",
                    details={"uri": uri, "allowed_buckets": sorted(allowed)},
                )
    return content


def validate_model(spec: CacheSpec, content: CacheContent) -> None:
    """Raises UnknownModel, or BelowMinimumTokens when Vertex would refuse the content."""
    if spec.provider == Provider.VERTEX:
        facts = catalog.VERTEX_MODELS.get(spec.model)
        if facts is None:
            raise UnknownModel(
                f"Unknown Vertex model {spec.model!r}.",
                details={"known": sorted(catalog.VERTEX_MODELS)},
            )
        estimate = catalog.vertex_token_estimate(content)
        if estimate < facts.min_cache_tokens:
            raise BelowMinimumTokens(
                f"The content has about {estimate} tokens; {spec.model} caches only from "
                f"{facts.min_cache_tokens} tokens.",
                details={"minimum": facts.min_cache_tokens, "estimated_tokens": estimate},
            )
    elif spec.provider == Provider.VLLM:
        served = catalog.vllm_models()
        if spec.model not in served:
            raise UnknownModel(
                f"No registered worker serves {spec.model!r}.", details={"known": sorted(served)}
            )
    else:
        raise UnknownModel(f"Unknown provider {spec.provider!r}.")
