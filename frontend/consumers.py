"""WebSocket consumers: admitted by the access boundary, join permitted topics, only push.

Connect: the caller (session cookie, or ``Authorization: Bearer cpk_...`` for scripts)
goes through ``tenants.access`` like any REST request; refusals are audited there.
A socket joins only the topics whose permission it holds (``controlplane.live``'s
``TENANT_TOPIC_PERMISSIONS``: usage ticks need ``usage.get``, budget alerts
``budgets.get``, cache events ``caches.get``).

Revocation bound: every ``CACHEPLANE_WS_RECHECK_SECONDS`` (2 s) the socket re-reads its
credential (the session still exists and still names the user; the key is not revoked
or expired; the principal is active) and re-decides access from the database. A
logout, a revoked key, a removed binding or a suspended tenant closes the socket
within that bound (close codes: 4401 credential ended or a key refused at connect,
4403 suspended or no readable topic, 4404 no binding or no such tenant, 4429 the
source is locked out for guessing keys); a lost permission leaves its topic at once.
Mutations never arrive over the socket; they go through REST.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from controlplane.errors import DomainError
from controlplane.live import (
    PLATFORM_TOPIC_PERMISSIONS,
    TENANT_TOPIC_PERMISSIONS,
    platform_group,
    tenant_group,
)
from tenants.access import access_platform, access_refused, access_tenant
from tenants.actor import Actor, AuthMethod
from tenants.authentication import api_key_authenticate_at, scope_source, session_principal
from tenants.errors import ApiKeyRejected, TenantNotFound, TenantSuspended
from tenants.models import ApiKey, Principal, Tenant

CLOSE_CREDENTIAL_ENDED = 4401
CLOSE_UNAUTHORIZED = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_MANY_FAILURES = 4429
# Re-check cadence: a revoked key or ended session closes the socket within this plus
# one database read (the re-check skips the key cache), well inside the 5 s bound even
# on a loaded machine (5 s cadence + 5 s cache once measured 8.8 s).
DEFAULT_RECHECK_SECONDS = 2.0
# Kept for callers that list topics; the permission of each is in controlplane.live.
TENANT_TOPICS = tuple(TENANT_TOPIC_PERMISSIONS)
PLATFORM_TOPICS = tuple(PLATFORM_TOPIC_PERMISSIONS)


def recheck_seconds() -> float:
    return float(getattr(settings, "CACHEPLANE_WS_RECHECK_SECONDS", DEFAULT_RECHECK_SECONDS))


@dataclass(frozen=True)
class Decision:
    """The outcome of admitting (or re-admitting) a socket: topics to hold, or a close."""

    topics: tuple[str, ...] = ()
    close_code: int | None = None


# channels ships no type information, so its consumer base is Any to mypy.
class _PushConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Admits through ``decide`` (sync, in a thread), then re-decides periodically."""

    groups_joined: dict[str, str]
    _recheck_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        self.groups_joined = {}
        decision = await database_sync_to_async(self.decide)("connect")
        if decision.close_code is not None:
            await self.close(code=decision.close_code)
            return
        # Join before accepting: a client that sees the socket open must already get
        # every event published after that moment.
        await self._hold(decision.topics)
        await self.accept()
        self._recheck_task = asyncio.create_task(self._recheck_loop())

    async def disconnect(self, code: int) -> None:
        if self._recheck_task is not None:
            self._recheck_task.cancel()
        await self._hold(())

    async def _hold(self, topics: tuple[str, ...]) -> None:
        """Join the groups of ``topics`` and leave every other group."""
        wanted = {topic: self.group_for(topic) for topic in topics}
        for topic, group in list(self.groups_joined.items()):
            if topic not in wanted:
                await self.channel_layer.group_discard(group, self.channel_name)
                del self.groups_joined[topic]
        for topic, group in wanted.items():
            if topic not in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
                self.groups_joined[topic] = group

    async def _recheck_loop(self) -> None:
        while True:
            await asyncio.sleep(recheck_seconds())  # the revocation bound's cadence
            decision = await database_sync_to_async(self.decide)("recheck")
            if decision.close_code is not None:
                await self._hold(())
                await self.close(code=decision.close_code)
                return
            await self._hold(decision.topics)

    async def console_event(self, message: dict[str, Any]) -> None:
        await self.send_json(
            {
                "event": message["event"],
                "payload": message["payload"],
                "sent_at": message.get("sent_at"),
            }
        )

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        return None  # push only: anything the client sends is ignored

    # --- subclass hooks (sync, run in a worker thread) ---------------------------------

    def decide(self, phase: str) -> Decision:
        raise NotImplementedError

    def group_for(self, topic: str) -> str:
        raise NotImplementedError

    # --- the caller, re-read from the database on every decision ---------------------

    def caller(self, phase: str) -> tuple[Actor, ApiKey | None] | None:
        """The socket's credential as it stands now; None when it ended (logout,
        revoked or expired key, disabled principal) since the socket opened.

        Raises CredentialRefused for a key refused at connect (already audited)."""
        token = _bearer(self.scope)
        if token is not None:
            return _key_caller(self.scope, token, phase)
        return _session_caller(self.scope)

    def refuse(self, *, tenant: Tenant | None, reason: str, code: int, phase: str) -> Decision:
        actor = _scope_actor(self.scope, principal=None)
        access_refused(
            actor=actor,
            tenant=tenant,
            action=f"frontend.socket.{phase}",
            reason=reason,
            target_type="socket",
            target_id=self.scope.get("path", "")[:200],
        )
        return Decision(close_code=code)


class PlatformEventsConsumer(_PushConsumer):
    """Platform-wide events and snapshots, for principals holding platform permissions."""

    def group_for(self, topic: str) -> str:
        return platform_group(topic)

    def decide(self, phase: str) -> Decision:
        try:
            caller = self.caller(phase)
        except CredentialRefused as refused:
            return Decision(close_code=refused.close_code)
        if caller is None:
            code = CLOSE_CREDENTIAL_ENDED if phase == "recheck" else CLOSE_UNAUTHORIZED
            return self.refuse(tenant=None, reason="credential_ended", code=code, phase=phase)
        actor, key = caller
        try:
            grant = access_platform(
                actor=actor,
                permission="tenants.list",
                action=f"frontend.socket.{phase}",
                api_key=key,
                target_type="socket",
                target_id=self.scope.get("path", "")[:200],
            )
        except DomainError:
            return Decision(close_code=CLOSE_UNAUTHORIZED)
        topics = tuple(t for t, p in PLATFORM_TOPIC_PERMISSIONS.items() if grant.allows(p))
        return Decision(topics=topics)


class TenantLiveConsumer(_PushConsumer):
    """One tenant's cache events, usage ticks and alerts, each for those who may read it."""

    tenant_id: str | None = None

    def group_for(self, topic: str) -> str:
        return tenant_group(self.tenant_id, topic)

    def decide(self, phase: str) -> Decision:
        slug = self.scope["url_route"]["kwargs"]["tenant"]
        try:
            caller = self.caller(phase)
        except CredentialRefused as refused:
            return Decision(close_code=refused.close_code)
        if caller is None and phase == "recheck":
            tenant = Tenant.objects.filter(pk=self.tenant_id).first() if self.tenant_id else None
            return self.refuse(
                tenant=tenant, reason="credential_ended", code=CLOSE_CREDENTIAL_ENDED, phase=phase
            )
        actor, key = caller if caller is not None else (_scope_actor(self.scope, None), None)
        try:
            grant = access_tenant(
                actor=actor,
                tenant_ref=slug,
                permission="member",
                action=f"frontend.socket.{phase}",
                api_key=key,
                target_type="socket",
                target_id=self.scope.get("path", "")[:200],
            )
        except TenantNotFound:
            return Decision(close_code=CLOSE_NOT_FOUND)
        except (TenantSuspended, DomainError):
            return Decision(close_code=CLOSE_UNAUTHORIZED)
        assert grant.tenant is not None
        self.tenant_id = str(grant.tenant.pk)
        topics = tuple(t for t, p in TENANT_TOPIC_PERMISSIONS.items() if grant.allows(p))
        if not topics:
            return self.refuse(
                tenant=grant.tenant,
                reason="no_readable_topic",
                code=CLOSE_UNAUTHORIZED,
                phase=phase,
            )
        return Decision(topics=topics)


def _bearer(scope: dict[str, Any]) -> str | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _scope_actor(
    scope: dict[str, Any], principal: Principal | None, key_id: str | None = None
) -> Actor:
    source = scope_source(scope)  # the client address, trusted proxies resolved
    if key_id is not None:
        method = AuthMethod.API_KEY
    else:
        method = AuthMethod.SESSION if principal is not None else AuthMethod.ANONYMOUS
    return Actor(
        principal=principal,
        auth_method=method,
        key_id=key_id,
        source_ip=source.ip,
        user_agent=source.user_agent,
    )


def _session_caller(scope: dict[str, Any]) -> tuple[Actor, None] | None:
    """The session's user as it stands now (``tenants.authentication.session_principal``):
    None once the session is gone (logout) or no longer names the same, active user
    (password change invalidates the auth hash)."""
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    session_key = getattr(scope.get("session"), "session_key", None)
    fresh = session_principal(user_id=user.pk, session_key=session_key)
    return (_scope_actor(scope, fresh), None) if fresh is not None else None


class CredentialRefused(Exception):
    """A presented key was refused at connect (audited); close with ``close_code``."""

    def __init__(self, close_code: int) -> None:
        super().__init__(close_code)
        self.close_code = close_code


def _key_caller(scope: dict[str, Any], token: str, phase: str) -> tuple[Actor, ApiKey] | None:
    """The key's principal, re-read from the database (not the 5 s key cache).

    Authentication is ``tenants.authentication.api_key_authenticate_at``'s: at connect
    behind the guess throttle shared with REST and the gateway, a refused key audited
    (``tenants.api_key.authenticate``, failed, ``entry_point`` socket) and closing
    ``4401``, a locked-out source closing ``4429``. On a re-check a key that stopped
    working ends the socket (None).
    """
    from django.utils import timezone

    from tenants.services.keys import key_cache, key_digest
    from tenants.services.throttling import TooManyFailures

    key_cache.forget(key_digest(token))  # the socket's bound is its own re-check period
    try:
        authenticated = api_key_authenticate_at(
            token=token,
            source=scope_source(scope),
            entry_point="socket",
            throttled=phase == "connect",
        )
    except TooManyFailures:
        raise CredentialRefused(CLOSE_TOO_MANY_FAILURES) from None
    except ApiKeyRejected as rejected:
        if phase != "connect":
            return None  # the caller records the refusal (credential_ended)
        code = CLOSE_UNAUTHORIZED if rejected.code == "tenant_suspended" else CLOSE_CREDENTIAL_ENDED
        raise CredentialRefused(code) from None
    key = authenticated.key
    if key.expires_at is not None and key.expires_at <= timezone.now():
        return None
    return _scope_actor(scope, authenticated.principal, key_id=str(key.pk)), key
