"""Tenants' hosted-provider credentials: writes (audited), the gateway's cached read.

``provider_credential_set`` stores (or replaces: a rotation) a tenant's key for one
provider, sealed (``gateway.credentials``), in one transaction with its audit event
(``gateway.provider_credential.set`` / ``.rotate``; the secret redacted, its fingerprint
shown). No read here returns the secret except :func:`credential_for`, the gateway's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cachetools import TTLCache
from django.db import transaction
from django.db.models import CharField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Cast

from audit.models import AuditEvent
from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot
from controlplane.db import db_sync_to_async
from controlplane.errors import Conflict, NotFound, ValidationFailed
from gateway import credentials
from gateway.models import HostedProvider, ProviderCredential
from tenants.actor import Actor
from tenants.models import Tenant

REFRESH_SECONDS = 2.0
MAX_SECRET_CHARS = 512


class InvalidProviderCredential(ValidationFailed):
    code = "invalid_provider_credential"


class ProviderCredentialNotFound(NotFound):
    code = "provider_credential_not_found"


class ProviderCredentialExists(Conflict):
    code = "provider_credential_exists"


def _clean(provider: str, secret: str) -> None:
    if provider not in HostedProvider.values:
        raise InvalidProviderCredential(
            f"Unknown provider {provider!r}.", details={"provider": sorted(HostedProvider.values)}
        )
    if not isinstance(secret, str) or not 8 <= len(secret) <= MAX_SECRET_CHARS:
        raise InvalidProviderCredential("api_key must be 8-512 characters.")
    if any(c.isspace() for c in secret) or not secret.isprintable():
        raise InvalidProviderCredential("api_key must not contain spaces or control characters.")


def provider_credential_set(
    *,
    tenant: Tenant,
    actor: Actor,
    provider: str,
    secret: str,
    cache_autopilot: bool | None = None,
    replace: bool = True,
) -> ProviderCredential:
    """Store the tenant's key for ``provider`` (a second call rotates it).

    Audited as ``gateway.provider_credential.set`` (first key) or ``.rotate``; raises
    InvalidProviderCredential before writing anything. ``replace=False`` (the console's
    "add"): an existing key raises ProviderCredentialExists under the row lock, so two
    simultaneous adds never turn the second into a silent rotation.
    """
    _clean(provider, secret)
    with transaction.atomic():
        found = (
            ProviderCredential.objects.select_for_update(of=("self",))
            .filter(tenant=tenant, provider=provider)
            .first()
        )
        if found is not None and not replace:
            raise ProviderCredentialExists(
                f"{HostedProvider(provider).label} already has a key. Rotate it in its row, "
                "or remove it first.",
                details={"field": "provider", "provider": provider},
            )
        before = model_snapshot(found) if found is not None else EMPTY
        row = found or ProviderCredential(tenant=tenant, provider=provider)
        row.secret_sealed = credentials.seal(secret)
        row.fingerprint = credentials.fingerprint(secret)
        if cache_autopilot is not None:
            row.cache_autopilot = cache_autopilot
        if found is None:
            row.created_by = actor.principal
        row.save()
        audit_record(
            actor=actor,
            action="gateway.provider_credential." + ("set" if found is None else "rotate"),
            tenant=tenant,
            target_type="provider_credential",
            target_id=str(row.pk),
            changes=diff(before, model_snapshot(row)),
        )
    forget()
    return row


def _locked(credential: ProviderCredential) -> ProviderCredential:
    """The row, locked; ProviderCredentialNotFound when it went in between (a 404, and
    no audit row for a change that changed nothing)."""
    locked = (
        ProviderCredential.objects.select_for_update(of=("self",))
        .filter(pk=credential.pk, tenant_id=credential.tenant_id)
        .first()
    )
    if locked is None:
        raise ProviderCredentialNotFound(
            f"No {credential.provider} key for this tenant.",
            details={"provider": credential.provider},
        )
    return locked


def provider_credential_update(
    *, credential: ProviderCredential, actor: Actor, cache_autopilot: bool
) -> ProviderCredential:
    """Switch the cache autopilot for this tenant and provider (audited ``.update``)."""
    with transaction.atomic():
        locked = _locked(credential)
        before = model_snapshot(locked)
        locked.cache_autopilot = cache_autopilot
        locked.save(update_fields=["cache_autopilot", "updated_at"])
        audit_record(
            actor=actor,
            action="gateway.provider_credential.update",
            tenant=locked.tenant,
            target_type="provider_credential",
            target_id=str(locked.pk),
            changes=diff(before, model_snapshot(locked)),
        )
    forget()
    return locked


def provider_credential_delete(*, credential: ProviderCredential, actor: Actor) -> None:
    """Remove the tenant's key (its requests to that provider then get 400)."""
    with transaction.atomic():
        before = model_snapshot(_locked(credential))
        ProviderCredential.objects.filter(pk=credential.pk, tenant_id=credential.tenant_id).delete()
        audit_record(
            actor=actor,
            action="gateway.provider_credential.delete",
            tenant=credential.tenant,
            target_type="provider_credential",
            target_id=str(credential.pk),
            changes=diff(before, EMPTY),
        )
    forget()


def provider_credentials_reseal_all_tenants(*, actor: Actor) -> int:
    """Re-encrypt every sealed key under the newest configured key (a key rotation).

    Cross-tenant by design (the encryption key is the platform's). One audit event for
    the run (no secret in it). Raises InvalidToken when a row opens with no key.
    """
    count = 0
    with transaction.atomic():
        rows = ProviderCredential.objects.all_tenants().select_for_update().order_by("pk")
        for row in rows:
            row.secret_sealed = credentials.reseal(row.secret_sealed)
            row.save(update_fields=["secret_sealed", "updated_at"])
            count += 1
        audit_record(
            actor=actor,
            action="gateway.provider_credential.reseal",
            tenant=None,
            target_type="provider_credential",
            target_id="*",
            details={"resealed": count},
        )
    forget()
    return count


def provider_credential_list(*, tenant: Tenant) -> QuerySet[ProviderCredential]:
    """The tenant's provider keys by provider, each annotated ``rotated_at``.

    ``rotated_at`` is when the current key replaced an earlier one (None: never
    rotated), read from the audit log's ``.rotate`` events: ``updated_at`` also moves
    when the autopilot is switched or the row resealed, which is no rotation.
    """
    rotations = AuditEvent.objects.filter(
        tenant_id=OuterRef("tenant_id"),
        target_type="provider_credential",
        target_id=Cast(OuterRef("pk"), output_field=CharField()),
        action="gateway.provider_credential.rotate",
    ).order_by("-occurred_at")
    return (
        ProviderCredential.objects.filter(tenant=tenant)
        .annotate(rotated_at=Subquery(rotations.values("occurred_at")[:1]))
        .order_by("provider")
    )


def provider_credential_get(*, tenant: Tenant, provider: str) -> ProviderCredential | None:
    return ProviderCredential.objects.filter(tenant=tenant, provider=provider).first()


@dataclass(frozen=True)
class HostedCredential:
    """What the gateway sends with a request (the secret never reaches a log)."""

    secret: str | None = field(repr=False)
    cache_autopilot: bool


_cached: TTLCache[tuple[str, str], HostedCredential | None] = TTLCache(
    maxsize=10_000, ttl=REFRESH_SECONDS
)


def _load(tenant_id: str, provider: str) -> HostedCredential | None:
    row = ProviderCredential.objects.filter(tenant_id=tenant_id, provider=provider).first()
    if row is None:
        return None
    return HostedCredential(
        secret=credentials.unseal(row.secret_sealed), cache_autopilot=row.cache_autopilot
    )


async def credential_for(tenant_id: str, provider: str) -> HostedCredential | None:
    """The tenant's key for ``provider`` (None: none set), cached ``REFRESH_SECONDS``."""
    key = (tenant_id, provider)
    if key in _cached:
        return _cached[key]
    found = await db_sync_to_async(_load)(tenant_id, provider)
    _cached[key] = found
    return found


def forget() -> None:
    _cached.clear()
