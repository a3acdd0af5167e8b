"""Resolve the cache a gateway request names, within the caller's tenant."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from controlplane.db import db_sync_to_async
from gateway.directory import CacheView, directory
from gateway.errors import GatewayError
from gateway.identity import Identity, identity_refused


async def resolve_cache(
    identity: Identity, body: dict[str, Any], request: Request
) -> CacheView | None:
    """The live cache a request names (``cache`` in the body or ``X-Cacheplane-Cache``),
    of the caller's tenant and for the request's model; None when it names none. An
    unknown name is a 404 ``cache_not_found``, audited as a refusal."""
    reference = body.pop("cache", None) or request.headers.get("x-cacheplane-cache")
    if reference is None:
        return None
    if not isinstance(reference, str) or not 0 < len(reference) <= 100:
        raise GatewayError(
            400, "invalid_request", "'cache' must be a cache id or name.", param="cache"
        )
    cache = await directory.cache(identity.tenant_id, reference)
    if cache is None:
        await db_sync_to_async(_audit_not_found)(identity, reference)
        raise GatewayError(404, "cache_not_found", f"No live cache {reference!r}.", param="cache")
    if cache.model != body["model"]:
        raise GatewayError(
            400,
            "cache_model_mismatch",
            f"Cache {cache.name!r} is for model {cache.model!r}.",
            param="model",
        )
    return cache


def _audit_not_found(identity: Identity, reference: str) -> None:
    identity_refused(
        identity,
        action="gateway.cache.not_found",
        reason="cache_not_found",
        details={"reference": reference},
    )
