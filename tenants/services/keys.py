"""API keys: issue (shown once), authenticate, revoke.

Format ``cpk_<32 base62 random><6 base62 CRC32 checksum>``, like GitHub's tokens: the
fixed prefix and checksum let secret scanners recognise a leaked key offline without a
database lookup. Only an HMAC-SHA256 digest (keyed by the deployment secret) is stored;
lookups go by digest and the final comparison is constant-time.

Revocation bound: authenticated keys are cached in-process for at most
``KEY_CACHE_SECONDS`` (5 s); a revocation is seen by every process within that bound
(immediately by the process that revoked).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from cachetools import TTLCache
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot
from controlplane.errors import NotFound
from tenants.actor import Actor
from tenants.errors import ApiKeyRejected, InvalidExpiry, UnknownPrincipal
from tenants.models import ApiKey, Principal, Tenant, TenantState
from tenants.services.authorization import principal_permissions
from tenants.services.iam import require_held_permissions

KEY_PREFIX = "cpk_"
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_RANDOM_LEN = 32  # 32 base62 chars ≈ 190 bits
_CHECKSUM_LEN = 6
KEY_LENGTH = len(KEY_PREFIX) + _RANDOM_LEN + _CHECKSUM_LEN
DISPLAY_PREFIX_LEN = len(KEY_PREFIX) + 8
KEY_CACHE_SECONDS = 5.0
LAST_USED_RESOLUTION = timedelta(seconds=60)


def _base62(number: int, width: int) -> str:
    chars = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def key_checksum(random_part: str) -> str:
    """Six base62 characters of CRC32 over the random part."""
    return _base62(zlib.crc32(random_part.encode("ascii")), _CHECKSUM_LEN)


def key_generate() -> str:
    """A fresh plaintext key."""
    random_part = "".join(secrets.choice(_ALPHABET) for _ in range(_RANDOM_LEN))
    return f"{KEY_PREFIX}{random_part}{key_checksum(random_part)}"


_BODY = re.compile(f"[{_ALPHABET}]+")


def key_is_well_formed(token: str) -> bool:
    """Prefix, length, alphabet and checksum are right (what a secret scanner checks)."""
    if len(token) != KEY_LENGTH or not token.startswith(KEY_PREFIX):
        return False
    body = token[len(KEY_PREFIX) :]
    if _BODY.fullmatch(body) is None:
        return False
    random_part, checksum = body[:_RANDOM_LEN], body[_RANDOM_LEN:]
    return hmac.compare_digest(key_checksum(random_part), checksum)


def key_digest(token: str) -> str:
    """Keyed digest stored in the database (a leaked table alone cannot test guesses)."""
    return hmac.digest(_pepper(settings.SECRET_KEY), token.encode("utf-8"), "sha256").hex()


@lru_cache(maxsize=4)
def _pepper(secret_key: str) -> bytes:
    """The digest key for ``SECRET_KEY`` (derived once per key, not per request)."""
    return hashlib.sha256(f"cacheplane.api-key.v1:{secret_key}".encode()).digest()


@dataclass(frozen=True)
class AuthenticatedKey:
    """What a successful key authentication yields (cached for the revocation bound)."""

    key: ApiKey
    principal: Principal
    tenant: Tenant


class _KeyCache:
    """Digest → AuthenticatedKey for at most KEY_CACHE_SECONDS (per process, 10k keys, LRU)."""

    def __init__(self) -> None:
        self.clock = time.monotonic  # replaceable in tests to move time without sleeping
        self._entries: TTLCache[str, AuthenticatedKey] = TTLCache(
            maxsize=10_000, ttl=KEY_CACHE_SECONDS, timer=lambda: self.clock()
        )
        self._lock = threading.Lock()

    def get(self, digest: str) -> AuthenticatedKey | None:
        with self._lock:
            return self._entries.get(digest)

    def put(self, digest: str, value: AuthenticatedKey) -> None:
        with self._lock:
            self._entries[digest] = value

    def forget(self, digest: str) -> None:
        with self._lock:
            self._entries.pop(digest, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


key_cache = _KeyCache()


def api_key_cached(token: str) -> AuthenticatedKey | None:
    """The cached authentication of a well-formed token, without touching the database.

    The gateway calls this on its event loop and falls back to ``api_key_authenticate``
    in a thread only on a miss (at most once per key per KEY_CACHE_SECONDS).
    """
    if not key_is_well_formed(token):
        return None
    cached = key_cache.get(key_digest(token))
    return cached if cached is not None and _still_valid(cached) else None


def api_key_authenticate(token: str, *, fresh: bool = False) -> AuthenticatedKey:
    """Resolve a bearer token or raise ApiKeyRejected with a stable code.

    ``fresh`` skips this process's key cache (a periodic re-check of a long-lived
    connection: reading a cached answer there would add the cache's age to the
    revocation bound).

    Codes: ``invalid_api_key`` (malformed or unknown), ``api_key_revoked``,
    ``api_key_expired``, ``principal_disabled``, ``tenant_suspended``.
    """
    if not key_is_well_formed(token):
        raise ApiKeyRejected("invalid_api_key", "The API key is malformed.")
    digest = key_digest(token)
    cached = None if fresh else key_cache.get(digest)
    if cached is not None and _still_valid(cached):
        return cached
    # all_tenants: a key is found by digest before its tenant is known
    key = (
        ApiKey.objects.all_tenants()
        .select_related("principal", "tenant")
        .filter(digest=digest)
        .first()
    )
    if key is None or not hmac.compare_digest(key.digest, digest):
        raise ApiKeyRejected("invalid_api_key", "The API key is not valid.")
    ids = {"key_id": str(key.pk), "tenant_id": str(key.tenant_id)}
    if key.revoked_at is not None:
        raise ApiKeyRejected("api_key_revoked", "The API key has been revoked.", **ids)
    if key.expires_at is not None and key.expires_at <= timezone.now():
        raise ApiKeyRejected("api_key_expired", "The API key has expired.", **ids)
    if not key.principal.is_active:
        raise ApiKeyRejected("principal_disabled", "The key's principal is disabled.", **ids)
    if key.tenant.state != TenantState.ACTIVE:
        raise ApiKeyRejected("tenant_suspended", "The tenant is suspended.", **ids)
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_RESOLUTION:
        # At most one write per key per minute, not one per request.
        # all_tenants: a key is found by digest before its tenant is known
        ApiKey.objects.all_tenants().filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    result = AuthenticatedKey(key=key, principal=key.principal, tenant=key.tenant)
    key_cache.put(digest, result)
    return result


def _still_valid(cached: AuthenticatedKey) -> bool:
    expires_at = cached.key.expires_at
    return expires_at is None or expires_at > timezone.now()


@dataclass(frozen=True)
class IssuedKey:
    key: ApiKey
    plaintext: str


def api_key_create(
    *,
    actor: Actor,
    tenant: Tenant,
    name: str,
    principal: Principal | None = None,
    expires_at: datetime | None = None,
) -> IssuedKey:
    """Issue a key for the caller (a human bound here) or a service account of this tenant.

    A key for a service account may not carry permissions the caller lacks (escalation).
    """
    holder = principal or actor.principal
    if holder is None:
        raise UnknownPrincipal("A key needs a principal.")
    if holder.is_service_account:
        if holder.tenant_id != tenant.pk:
            raise UnknownPrincipal(f"Unknown principal {holder.pk}.")
        require_held_permissions(
            actor=actor,
            tenant=tenant,
            permissions=set(principal_permissions(principal=holder, tenant=tenant)),
            what="a key for this service account",
        )
    elif actor.principal is None or holder.pk != actor.principal.pk:
        raise UnknownPrincipal("Keys for humans can only be created by themselves.")
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidExpiry("expires_at must be in the future.")
    plaintext = key_generate()
    with transaction.atomic():
        key = ApiKey.objects.create(
            tenant=tenant,
            principal=holder,
            name=name,
            prefix=plaintext[:DISPLAY_PREFIX_LEN],
            digest=key_digest(plaintext),
            created_by=actor.principal,
            expires_at=expires_at,
        )
        audit_record(
            actor=actor,
            action="tenants.api_key.create",
            tenant=tenant,
            target_type="api_key",
            target_id=str(key.pk),
            changes=diff(EMPTY, model_snapshot(key)),
        )
    return IssuedKey(key=key, plaintext=plaintext)


def api_key_revoke(*, actor: Actor, tenant: Tenant, key_id: str) -> ApiKey:
    """Revoke a key of this tenant (idempotent; the audit event records each call)."""
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().filter(tenant=tenant, pk=key_id).first()
        if key is None:
            raise NotFound("No such API key.")
        before = model_snapshot(key)
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            action="tenants.api_key.revoke",
            tenant=tenant,
            target_type="api_key",
            target_id=str(key.pk),
            changes=diff(before, model_snapshot(key)),
        )
        digest = key.digest
        transaction.on_commit(lambda: key_cache.forget(digest))
    return key
