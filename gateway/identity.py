"""Who is calling: API-key authentication and the access decision, cached for the hot path.

The decision itself is ``tenants.access.access_tenant``'s (the one boundary every entry
point calls), and so is the audit of a refusal (``gateway.inference.invoke``, denied).

The key lookup goes to the database at most once per key per ``KEY_CACHE_SECONDS``
(``tenants.services.keys``); the tenant's salt and the key's ``inference.invoke``
permission are cached for the same bound, so a revocation, suspension or binding change
reaches the gateway within 5 seconds, and a steady client costs no database query.

A stream outlives its admission: every ``CACHEPLANE_GATEWAY_STREAM_RECHECK_SECONDS``
(2 s) one task per event loop re-reads the keys of all running streams in one query,
skipping the caches
(``stream_watch``); a revoked or expired key, a disabled principal or a suspended tenant
ends the stream within that cadence plus one read, inside the 5 s bound.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cachetools import TTLCache

from controlplane.db import db_sync_to_async
from controlplane.errors import DomainError
from controlplane.loop_local import LoopLocal

if TYPE_CHECKING:
    from tenants.actor import Actor
from gateway.errors import GatewayError
from tenants.authentication import RequestSource, api_key_authenticate_at
from tenants.errors import ApiKeyRejected
from tenants.services.keys import (
    KEY_CACHE_SECONDS,
    AuthenticatedKey,
    api_key_cached,
    key_cache,
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


# ---- streams: the revocation bound holds for a stream already running ----------------

logger = logging.getLogger(__name__)


def stream_recheck_seconds() -> float:
    from django.conf import settings

    return float(settings.CACHEPLANE_GATEWAY_STREAM_RECHECK_SECONDS)


def identities_refused(key_ids: set[str]) -> dict[str, GatewayError]:
    """Key id → why it may no longer stream, read fresh from the database (one query).

    Runs in a worker thread. A refused key is also forgotten by this process's caches, so
    the next request with it is refused at once, not after the cache's 5 s.
    """
    from django.utils import timezone

    from tenants.models import ApiKey

    # all_tenants: the keys of every tenant streaming through this process, by id.
    rows = ApiKey.objects.all_tenants().select_related("principal", "tenant").filter(pk__in=key_ids)
    found = {str(key.pk): key for key in rows}
    now = timezone.now()
    refused: dict[str, GatewayError] = {}
    for key_id in key_ids:
        key = found.get(key_id)
        if key is None or key.revoked_at is not None:
            refused[key_id] = GatewayError(401, "api_key_revoked", "The API key has been revoked.")
        elif key.expires_at is not None and key.expires_at <= now:
            refused[key_id] = GatewayError(401, "api_key_expired", "The API key has expired.")
        elif not key.principal.is_active:
            refused[key_id] = GatewayError(
                401, "principal_disabled", "The key's principal is disabled."
            )
        elif not key.tenant.is_active:
            refused[key_id] = GatewayError(403, "tenant_suspended", "The tenant is suspended.")
        else:
            continue
        if key is not None:
            key_cache.forget(key.digest)
        with _lock:
            _identities.pop(key_id, None)
    return refused


@dataclass(eq=False)
class StreamWatch:
    """One running stream's standing: ``refused`` is set when its key may no longer call.

    The relay reads ``refused`` between events (an attribute read per event). While it
    waits on the upstream (``waiting``), a refusal also interrupts that wait by
    cancelling the relaying task, as ``asyncio.timeout`` does; ``interrupted`` tells the
    relay that cancellation was this one (to be absorbed), not the client leaving.
    """

    key_id: str
    task: asyncio.Task[object] | None = None
    refused: GatewayError | None = None
    waiting: bool = False
    cancelled: bool = False
    watching: set[StreamWatch] = field(default_factory=set, repr=False)  # its loop's

    def refuse(self, error: GatewayError) -> None:
        if self.refused is not None:
            return
        self.refused = error
        if self.waiting and self.task is not None and not self.task.done():
            self.cancelled = True
            self.task.cancel()

    def interrupted(self) -> bool:
        """After a wait: absorb this watch's own cancellation. False when another
        cancellation (the client leaving, shutdown) is pending: the relay re-raises."""
        if not self.cancelled or self.task is None:
            return False
        self.cancelled = False
        return self.task.uncancel() == 0

    def end(self) -> None:
        self.watching.discard(self)


@dataclass
class _Watcher:
    """This loop's running streams and the one task that re-checks them all."""

    watches: set[StreamWatch] = field(default_factory=set)
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while self.watches:
            await asyncio.sleep(stream_recheck_seconds())
            watching = list(self.watches)
            if not watching:
                break
            try:
                refused = await db_sync_to_async(identities_refused)(
                    {watch.key_id for watch in watching}
                )
            except Exception:  # the database is away: streams go on, checked next time
                logger.exception("stream key re-check failed")
                continue
            for watch in watching:
                error = refused.get(watch.key_id)
                if error is not None:
                    watch.refuse(error)

    def finished(self, task: asyncio.Task[None]) -> None:
        """Drop the ended task: nothing here keeps a closed loop alive (``LoopLocal``)."""
        if self.task is task:
            self.task = None


_watcher: LoopLocal[_Watcher] = LoopLocal(_Watcher)


def stream_watch(identity: Identity) -> StreamWatch:
    """Watch a stream of ``identity`` from now until ``end()`` (call it in the task that
    relays the stream). O(1): the re-check runs on its own cadence, for all streams."""
    watcher = _watcher.get()
    watch = StreamWatch(
        key_id=identity.key_id, task=asyncio.current_task(), watching=watcher.watches
    )
    watcher.watches.add(watch)
    if watcher.task is None or watcher.task.done():
        watcher.task = asyncio.ensure_future(watcher.run())
        watcher.task.add_done_callback(watcher.finished)
    return watch
