"""Rotating an API key: a new secret for the same name, holder, expiry and rate limit.

Why a service of its own: rotation is three writes that must commit together (issue the
new key, move the old key's rate limit to it, revoke the old key) and one audit event
that ties old and new; the create and revoke services each add their own event too, so
the history of either key reads whole.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from controlplane.errors import Conflict, NotFound
from tenants.actor import Actor
from tenants.models import ApiKey, Tenant
from tenants.services.keys import IssuedKey, api_key_create, api_key_revoke


class KeyNotRotatable(Conflict):
    """A revoked or expired key has nothing to rotate: create a new one instead."""

    code = "key_not_rotatable"


def api_key_rotate(*, actor: Actor, tenant: Tenant, key_id: str) -> IssuedKey:
    """Issue a replacement of key ``key_id`` and revoke it, in one transaction.

    The replacement keeps the name, the holder (the same escalation rule as creating it:
    a key for a service account may not carry permissions the caller lacks; a person's
    key only by that person), the expiry and the key's own rate limit. Requests with
    the old secret fail from the commit on. Raises NotFound, KeyNotRotatable and the
    create service's errors.
    """
    with transaction.atomic():
        old = (
            ApiKey.objects.select_for_update(of=("self",))
            .select_related("principal")
            .filter(tenant=tenant, pk=key_id)
            .first()
        )
        if old is None:
            raise NotFound("No such API key.")
        if old.revoked_at is not None or (
            old.expires_at is not None and old.expires_at <= timezone.now()
        ):
            raise KeyNotRotatable(f"Key {old.name} is no longer active: create a new key.")
        issued = api_key_create(
            actor=actor,
            tenant=tenant,
            name=old.name,
            principal=old.principal if old.principal.is_service_account else None,
            expires_at=old.expires_at,
        )
        from gateway.models import RateLimit

        # The limit is the key's: it follows the key to its new secret (same values).
        moved = RateLimit.objects.filter(tenant=tenant, api_key=old).update(api_key=issued.key)
        api_key_revoke(actor=actor, tenant=tenant, key_id=str(old.pk))
        audit_record(
            actor=actor,
            action="tenants.api_key.rotate",
            tenant=tenant,
            target_type="api_key",
            target_id=str(issued.key.pk),
            details={"replaces": str(old.pk), "rate_limits_moved": moved},
        )
    return issued
