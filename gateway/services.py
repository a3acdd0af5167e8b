"""Writes of the gateway app: rate limits of tenants and API keys.

Each write is one transaction with its audit event (``gateway.rate_limit.<verb>``, with
before/after of the changed fields). The gateway picks a change up within its refresh
interval (``gateway.ratelimit.REFRESH_SECONDS``).
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot
from controlplane.errors import Conflict, NotFound, ValidationFailed
from gateway.models import RateLimit
from tenants.actor import Actor
from tenants.models import ApiKey, Tenant

LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "concurrent_requests", "weight")
#: requests_per_minute and concurrent_requests are ``integer`` columns: above it was a 500.
INT4_MAX = 2**31 - 1
MAX_LIMIT = 10**12
MAX_WEIGHT = 1000


class InvalidRateLimit(ValidationFailed):
    """A limit that is not a positive integer, a weight on a key, an unknown key."""

    code = "invalid_rate_limit"


class RateLimitExists(Conflict):
    """The tenant (or the key) already has a rate limit: change that one."""

    code = "rate_limit_exists"


class RateLimitNotFound(NotFound):
    code = "rate_limit_not_found"


def _clean(values: dict[str, Any], *, is_key: bool) -> dict[str, Any]:
    unknown = set(values) - set(LIMIT_FIELDS)
    if unknown:
        raise InvalidRateLimit(f"Unknown fields: {sorted(unknown)}.")
    cleaned: dict[str, Any] = {}
    for name, value in values.items():
        if name == "weight":
            if is_key and value not in (None, 1):
                raise InvalidRateLimit("weight applies to the tenant-wide limit only.")
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidRateLimit("weight must be an integer from 1 to 1000.")
            if not 1 <= value <= MAX_WEIGHT:
                raise InvalidRateLimit("weight must be an integer from 1 to 1000.")
        elif value is not None and (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not 1 <= value <= (MAX_LIMIT if name == "tokens_per_minute" else INT4_MAX)
        ):
            raise InvalidRateLimit(f"{name} must be a positive integer or null (unlimited).")
        cleaned[name] = value
    return cleaned


def rate_limit_create(
    *, tenant: Tenant, actor: Actor, api_key_id: str | None, values: dict[str, Any]
) -> RateLimit:
    """Set the limits of the tenant (``api_key_id`` None) or of one of its keys.

    Raises InvalidRateLimit (bad value, a key of another tenant), RateLimitExists.
    """
    api_key = None
    if api_key_id is not None:
        api_key = ApiKey.objects.filter(pk=api_key_id, tenant=tenant).first()
        if api_key is None:
            raise InvalidRateLimit(
                f"Unknown API key {api_key_id}.", details={"api_key": api_key_id}
            )
    limit = RateLimit(
        tenant=tenant,
        api_key=api_key,
        created_by=actor.principal,
        **_clean(values, is_key=api_key is not None),
    )
    try:
        with transaction.atomic():
            limit.save(force_insert=True)
            audit_record(
                actor=actor,
                action="gateway.rate_limit.create",
                tenant=tenant,
                target_type="rate_limit",
                target_id=str(limit.pk),
                changes=diff(EMPTY, model_snapshot(limit)),
            )
    except IntegrityError:
        raise RateLimitExists(
            "This scope already has a rate limit; change it instead.",
            details={"api_key": api_key_id},
        ) from None
    return limit


def rate_limit_update(*, limit: RateLimit, actor: Actor, changes: dict[str, Any]) -> RateLimit:
    """Change some limits (null: unlimited). Raises InvalidRateLimit."""
    cleaned = _clean(changes, is_key=limit.api_key_id is not None)
    with transaction.atomic():
        locked = RateLimit.objects.select_for_update(of=("self",)).get(
            pk=limit.pk, tenant_id=limit.tenant_id
        )
        before = model_snapshot(locked)
        for name, value in cleaned.items():
            setattr(locked, name, value)
        locked.save(update_fields=[*cleaned, "updated_at"])
        audit_record(
            actor=actor,
            action="gateway.rate_limit.update",
            tenant=locked.tenant,
            target_type="rate_limit",
            target_id=str(locked.pk),
            changes=diff(before, model_snapshot(locked)),
        )
    return locked


def rate_limit_delete(*, limit: RateLimit, actor: Actor) -> None:
    """Remove a rate limit (the scope becomes unlimited)."""
    with transaction.atomic():
        before = model_snapshot(limit)
        RateLimit.objects.filter(pk=limit.pk, tenant_id=limit.tenant_id).delete()
        audit_record(
            actor=actor,
            action="gateway.rate_limit.delete",
            tenant=limit.tenant,
            target_type="rate_limit",
            target_id=str(limit.pk),
            changes=diff(before, EMPTY),
        )
