"""Who is calling: API-key authentication and the access decision, cached for the hot path.

The decision itself is ``tenants.access.access_tenant``'s (the one boundary every entry
point calls), and so is the audit of a refusal (``gateway.inference.invoke``, denied).

The key lookup goes to the database at most once per key per ``KEY_CACHE_SECONDS``
(``tenants.services.keys``); the tenant's salt and the key's ``inference.invoke``
permission are cached for the same bound, so a revocation, suspension or binding change
reaches the gateway within 5 seconds, and a steady client costs no database query.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cachetools import TTLCache

from controlplane.db import db_sync_to_async
from controlplane.errors import DomainError

if TYPE_CHECKING:
    from tenants.actor import Actor
from gateway.errors import GatewayError
from tenants.authentication import RequestSource, api_key_authenticate_at
from tenants.errors import ApiKeyRejected
from tenants.services.keys import (
    KEY_CACHE_SECONDS,
    AuthenticatedKey,
    api_key_cached,
)
from tenants.services.throttling import TooManyFailures


@dataclass(frozen=True)
class Identity:
    """A caller allowed to invoke models, with what the data plane needs about it."""

    key_id: str
    principal_id: str
    tenant_id: str
    tenant_slug: str
    cache_salt: str
    authenticated: AuthenticatedKey
    source_ip: str | None = None
    user_agent: str = ""


clock = time.monotonic
# Key id → its admitted identity, for the same bound as the key cache (LRU past 10k keys).
_identities: TTLCache[str, Identity] = TTLCache(
    maxsize=10_000, ttl=KEY_CACHE_SECONDS, timer=lambda: clock()
)
_lock = threading.Lock()


def _resolve(authenticated: AuthenticatedKey, source_ip: str | None, user_agent: str) -> Identity:
    """Admit the key through the access boundary (audited) and derive the salt.

    Runs in a worker thread.
    """
    from tenants.access import PermissionMissing, access_tenant
    from tenants.salt import tenant_cache_salt

    try:
        access_tenant(
            actor=_key_actor(authenticated, source_ip, user_agent),
            tenant_ref=authenticated.tenant.pk,
            permission="inference.invoke",
            action="gateway.inference.invoke",
            api_key=authenticated.key,
            target_type="api_key",
            target_id=str(authenticated.key.pk),
        )
    except PermissionMissing:
        raise GatewayError(
            403, "permission_denied", "This API key may not invoke models (needs inference.invoke)."
        ) from None
    except DomainError as error:  # suspended since the key was cached, binding gone...
        raise GatewayError(error.http_status, error.code, error.message) from None
    return Identity(
        key_id=str(authenticated.key.pk),
        principal_id=str(authenticated.principal.pk),
        tenant_id=str(authenticated.tenant.pk),
        tenant_slug=authenticated.tenant.slug,
        cache_salt=tenant_cache_salt(authenticated.tenant),
        authenticated=authenticated,
        source_ip=source_ip,
        user_agent=user_agent[:300],
    )


def _key_actor(authenticated: AuthenticatedKey, source_ip: str | None, user_agent: str) -> Actor:
    from tenants.actor import Actor, AuthMethod

    return Actor(
        principal=authenticated.principal,
        auth_method=AuthMethod.API_KEY,
        key_id=str(authenticated.key.pk),
        source_ip=source_ip,
        user_agent=user_agent[:300],
    )


def identity_refused(
    identity: Identity, *, action: str, reason: str, details: dict[str, Any] | None = None
) -> None:
    """Audit a refusal of an admitted caller's request (sync; call it in a thread).

    For the data plane's own security refusals (a client-supplied ``cache_salt``, a
    cache reference outside the caller's tenant): written through the boundary's
    denial writer, so it survives any rollback.
    """
    from tenants.access import access_refused

    access_refused(
        actor=_key_actor(identity.authenticated, identity.source_ip, identity.user_agent),
        tenant=identity.authenticated.tenant,
        action=action,
        reason=reason,
        target_type="gateway",
        target_id=str((details or {}).get("reference", ""))[:200],
        details=details,
    )


def _audit_unauthenticated(source_ip: str | None, user_agent: str) -> None:
    from tenants.services.throttling import unauthenticated_request_record

    unauthenticated_request_record(
        source_ip=source_ip, user_agent=user_agent, entry_point="gateway", path="/v1/"
    )


async def identify(authorization: str | None, *, source: RequestSource) -> Identity:
    """Authenticate ``Authorization: Bearer <key>`` and check ``inference.invoke``.

    The admitted identity is cached per key; each request gets it stamped with its own
    ``source`` (a later request's refusal never carries the first request's address).
    """
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if not authorization or scheme.lower() != "bearer" or not token:
        # No usable credential: a denial like any other (coalesced per source).
        await db_sync_to_async(_audit_unauthenticated)(source.ip, source.user_agent)
        if not authorization:
            raise GatewayError(
                401, "missing_api_key", "Provide an API key: Authorization: Bearer <key>."
            )
        raise GatewayError(401, "invalid_api_key", "Authorization must be 'Bearer <key>'.")
    authenticated = api_key_cached(token)
    if authenticated is None:
        try:
            authenticated = await db_sync_to_async(api_key_authenticate_at)(
                token=token, source=source, entry_point="gateway"
            )
        except TooManyFailures as locked:
            headers = {"Retry-After": str(locked.retry_after)}
            raise GatewayError(429, locked.code, locked.message, headers=headers) from None
        except ApiKeyRejected as rejected:  # audited by api_key_authenticate_at
            status = 403 if rejected.code == "tenant_suspended" else 401
            raise GatewayError(status, rejected.code, rejected.message) from None
    key_id = str(authenticated.key.pk)
    with _lock:
        cached = _identities.get(key_id)
    if cached is None:
        cached = await db_sync_to_async(_resolve)(authenticated, source.ip, source.user_agent)
        with _lock:
            _identities[key_id] = cached
    if cached.source_ip == source.ip and cached.user_agent == source.user_agent:
        return cached
    return replace(cached, source_ip=source.ip, user_agent=source.user_agent)


def forget_identities() -> None:
    with _lock:
        _identities.clear()
