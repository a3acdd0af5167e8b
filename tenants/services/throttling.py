"""API-key guessing: a per-source failure counter in Redis, with lockout, audited.

Every entry point that takes a bearer key (REST's ``ApiKeyAuthentication``, the gateway's
``identify``) calls ``api_key_authenticate_throttled`` instead of ``api_key_authenticate``:

- a presented key that matches no key (``invalid_api_key``) counts one failure for the
  source; ``CACHEPLANE_API_KEY_FAILURE_LIMIT`` failures within
  ``CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS`` lock the source out for
  ``CACHEPLANE_API_KEY_LOCKOUT_SECONDS``;
- while locked, every key from that source is refused before any lookup with
  ``TooManyFailures`` (429 ``too_many_failures``, ``Retry-After``), valid keys included:
  otherwise a locked guesser would still learn which guess is right;
- revoked, expired or suspended keys are real keys, not guesses, and do not count.

The source is the client IP; IPv6 addresses count per /64, the block one client holds.
Audit: ``tenants.api_key.lockout`` when a lock engages, and ``tenants.api_key.throttled``
for requests refused while it holds, at most one row per source per
``REFUSAL_AUDIT_SECONDS`` carrying the count since the previous row (every refusal is
counted, none floods the chain). Both rows are denials on the platform chain, written in
their own transaction.

If Redis is unreachable the counter fails open (logged): authentication itself still
decides, and keys are ~190 random bits, so the counter bounds load and noise, not the
odds of a guess.
"""

from __future__ import annotations

import ipaddress
import logging

import redis
from django.conf import settings
from django.db import transaction

from audit.models import Outcome
from audit.services import audit_record
from controlplane import ops
from controlplane.errors import DomainError
from controlplane.redis import keys
from controlplane.redis.throttle import throttle_failure, throttle_refusal
from tenants.actor import Actor, AuthMethod
from tenants.errors import ApiKeyRejected
from tenants.services.keys import AuthenticatedKey, api_key_authenticate

logger = logging.getLogger(__name__)

REFUSAL_AUDIT_SECONDS = 60
# Only "no such key" is a guess; the other rejections name a real key.
GUESS_CODES = frozenset({"invalid_api_key"})


class TooManyFailures(DomainError):
    """The source is locked out after repeated failed API keys (429, ``Retry-After``)."""

    code = "too_many_failures"
    http_status = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, details={"retry_after": retry_after})
        self.retry_after = retry_after


def throttle_source(source_ip: str | None) -> str:
    """The counter's key for a client address (IPv6: its /64; unknown: one bucket)."""
    if not source_ip:
        return "unknown"
    try:
        address = ipaddress.ip_address(source_ip)
    except ValueError:
        return "unparsed"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{address}/64", strict=False))
    return str(address)


def _keys(source: str) -> tuple[str, str, str, str]:
    return keys.throttle_api_key(source)


def _actor(source_ip: str | None, user_agent: str) -> Actor:
    return Actor(
        principal=None,
        auth_method=AuthMethod.API_KEY,
        source_ip=source_ip,
        user_agent=user_agent[:300],
    )


def api_key_lockout_seconds(*, source_ip: str | None) -> int:
    """Seconds until the source may present keys again (0: not locked)."""
    _, lock, _, _ = _keys(throttle_source(source_ip))
    try:
        ttl = int(ops.redis_client().ttl(lock))
    except redis.RedisError:
        logger.warning("api-key throttle: Redis unavailable, not enforcing")
        return 0
    return max(ttl, 0)


def _refusal_record(*, source_ip: str | None, user_agent: str, retry_after: int) -> None:
    _, _, refused, gate = _keys(throttle_source(source_ip))
    try:
        count = throttle_refusal(
            ops.redis_client(),
            counter=refused,
            gate=gate,
            gate_seconds=REFUSAL_AUDIT_SECONDS,
            counter_ttl_seconds=settings.CACHEPLANE_API_KEY_LOCKOUT_SECONDS + REFUSAL_AUDIT_SECONDS,
        )
    except redis.RedisError:
        count = 1
    if count:
        with transaction.atomic():
            audit_record(
                actor=_actor(source_ip, user_agent),
                action="tenants.api_key.throttled",
                tenant=None,
                outcome=Outcome.DENIED,
                target_type="source",
                target_id=throttle_source(source_ip),
                details={"refused": count, "retry_after": retry_after},
            )


def _failure_record(*, source_ip: str | None, user_agent: str) -> None:
    source = throttle_source(source_ip)
    failures, lock, _, _ = _keys(source)
    limit = settings.CACHEPLANE_API_KEY_FAILURE_LIMIT
    try:
        counted = throttle_failure(
            ops.redis_client(),
            counter=failures,
            lock=lock,
            window_seconds=settings.CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS,
            limit=limit,
            lock_seconds=settings.CACHEPLANE_API_KEY_LOCKOUT_SECONDS,
        )
    except redis.RedisError:
        logger.warning("api-key throttle: Redis unavailable, failure not counted")
        return
    if counted.engaged:
        with transaction.atomic():
            audit_record(
                actor=_actor(source_ip, user_agent),
                action="tenants.api_key.lockout",
                tenant=None,
                outcome=Outcome.DENIED,
                target_type="source",
                target_id=source,
                details={
                    "failures": counted.failures,
                    "window_seconds": settings.CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS,
                    "lockout_seconds": settings.CACHEPLANE_API_KEY_LOCKOUT_SECONDS,
                },
            )


def api_key_authenticate_throttled(
    *, token: str, source_ip: str | None, user_agent: str = ""
) -> AuthenticatedKey:
    """``api_key_authenticate`` behind the per-source failure counter (see the module).

    Raises TooManyFailures while the source is locked out, else whatever
    ``api_key_authenticate`` raises (ApiKeyRejected), after counting a guess.
    """
    retry_after = api_key_lockout_seconds(source_ip=source_ip)
    if retry_after:
        _refusal_record(source_ip=source_ip, user_agent=user_agent, retry_after=retry_after)
        raise TooManyFailures(
            "Too many failed API keys from this address; try again later.",
            retry_after=retry_after,
        )
    try:
        return api_key_authenticate(token)
    except ApiKeyRejected as rejected:
        if rejected.code in GUESS_CODES:
            _failure_record(source_ip=source_ip, user_agent=user_agent)
        raise


def api_key_throttle_reset(*, source_ip: str | None = None, all_sources: bool = False) -> int:
    """Lift the lock and forget the counts of one source (or of every source).

    For an operator who has fixed a misconfigured client, and for tests; returns how
    many counter keys were removed.
    """
    client = ops.redis_client()
    if all_sources:
        names = list(client.scan_iter(match=keys.throttle_all(), count=500))
    else:
        names = list(_keys(throttle_source(source_ip)))
    return int(client.delete(*names)) if names else 0


def unauthenticated_request_record(
    *, source_ip: str | None, user_agent: str, entry_point: str, path: str
) -> None:
    """Audit requests refused for carrying no usable credential (401), coalesced.

    ``tenants.request.unauthenticated`` (denied, platform chain, written through
    ``audit_denial`` so no rollback erases it): at most one row per source per
    ``REFUSAL_AUDIT_SECONDS``, carrying how many such requests the source made since the
    previous row (``details.refused``) and the last path. Every refusal is counted; an
    anonymous client cannot flood the append-only chain. If Redis is unreachable each
    refusal writes its own row.
    """
    from audit.services.denials import audit_denial

    source = throttle_source(source_ip)
    # Under the key throttle's prefix, so api_key_throttle_reset(all_sources=True)
    # forgets these counts too.
    refused, gate = keys.throttle_anonymous(source)
    try:
        count = throttle_refusal(
            ops.redis_client(),
            counter=refused,
            gate=gate,
            gate_seconds=REFUSAL_AUDIT_SECONDS,
            counter_ttl_seconds=REFUSAL_AUDIT_SECONDS * 10,
        )
    except redis.RedisError:
        count = 1
    if not count:
        return
    audit_denial(
        actor=Actor(
            principal=None,
            auth_method=AuthMethod.ANONYMOUS,
            source_ip=source_ip,
            user_agent=user_agent[:300],
        ),
        action="tenants.request.unauthenticated",
        tenant=None,
        target_type="source",
        target_id=source,
        details={
            "reason": "not_authenticated",
            "entry_point": entry_point,
            "refused": count,
            "last_path": path[:200],
        },
    )
