"""Unauthenticated failures that must not flood the append-only audit chain.

A wrong ``/metrics`` token or a failed console login costs the sender nothing, so each
one writing its own hash-chained row would let anyone grow the chain at will. Both are
coalesced per source (``tenants.services.throttling.throttle_source``) and window
(``REFUSAL_AUDIT_SECONDS``): the first failure of a window writes a row at once, the
next ones are counted in Redis and the following row carries the count
(``details.failures``). Every failure is counted; none floods the chain.

Console logins are also locked **by source**, not only by username and source
(django-axes): ``CACHEPLANE_LOGIN_SOURCE_FAILURE_LIMIT`` failures from one source within
``CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS`` lock that source out of password sign-in
for ``CACHEPLANE_LOGIN_LOCKOUT_SECONDS`` (``tenants.session.lockout``, denied), so random
usernames do not dodge the per-username lock.

If Redis is unreachable each failure writes its own row and the source lock fails open
(logged), as the API-key throttle does.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.conf import settings
from django.db import transaction

from audit.services import audit_record
from audit.services.denials import audit_denial
from controlplane import ops
from controlplane.redis import keys
from controlplane.redis.throttle import throttle_failure, throttle_refusal
from tenants.actor import Actor
from tenants.services.throttling import REFUSAL_AUDIT_SECONDS, throttle_source

logger = logging.getLogger(__name__)


def _keys(kind: str, source_ip: str | None) -> keys.ThrottleKindKeys:
    # Under the key throttle's prefix: api_key_throttle_reset(all_sources=True) clears it.
    return keys.throttle_kind(kind, throttle_source(source_ip))


def failure_coalesced_record(
    *,
    kind: str,
    actor: Actor,
    action: str,
    outcome: str,
    target_type: str,
    target_id: str,
    details: dict[str, Any],
) -> None:
    """Audit one failure of ``kind`` from the actor's source, coalesced (see the module)."""
    counters = _keys(kind, actor.source_ip)
    try:
        count = throttle_refusal(
            ops.redis_client(),
            counter=counters.failed,
            gate=counters.failed_gate,
            gate_seconds=REFUSAL_AUDIT_SECONDS,
            counter_ttl_seconds=REFUSAL_AUDIT_SECONDS * 10,
        )
    except redis.RedisError:
        count = 1
    if not count:
        return
    with transaction.atomic():  # its own transaction: no caller's rollback erases it
        audit_record(
            actor=actor,
            action=action,
            tenant=None,
            outcome=outcome,
            target_type=target_type,
            target_id=target_id,
            details={**details, "failures": count, "window_seconds": REFUSAL_AUDIT_SECONDS},
        )


def login_source_lockout_seconds(*, source_ip: str | None) -> int:
    """Seconds until the source may try a password again (0: not locked)."""
    try:
        ttl = int(ops.redis_client().ttl(_keys("login", source_ip).lock))
    except redis.RedisError:
        logger.warning("login throttle: Redis unavailable, not enforcing the source lock")
        return 0
    return max(ttl, 0)


def login_failure_count(*, actor: Actor) -> None:
    """Count a failed password login for the source; engage the source lock at the limit."""
    counters = _keys("login", actor.source_ip)
    try:
        counted = throttle_failure(
            ops.redis_client(),
            counter=counters.failures,
            lock=counters.lock,
            window_seconds=settings.CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS,
            limit=settings.CACHEPLANE_LOGIN_SOURCE_FAILURE_LIMIT,
            lock_seconds=int(settings.AXES_COOLOFF_TIME.total_seconds()),
        )
    except redis.RedisError:
        logger.warning("login throttle: Redis unavailable, failure not counted")
        return
    if counted.engaged:
        audit_denial(
            actor=actor,
            action="tenants.session.lockout",
            tenant=None,
            target_type="source",
            target_id=throttle_source(actor.source_ip),
            details={
                "reason": "too_many_failed_logins",
                "failures": counted.failures,
                "window_seconds": settings.CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS,
                "lockout_seconds": int(settings.AXES_COOLOFF_TIME.total_seconds()),
            },
        )
