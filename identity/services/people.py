"""The people lifecycle: disable, re-enable, sign out everywhere, remove, reset a password.

Disabling a person stops them at once within the revocation bound: their sessions are
deleted (and Django refuses an inactive principal's session anyway), their API keys are
refused by ``api_key_authenticate`` (``principal_disabled``) and dropped from this
process's key cache, other processes' caches expire within ``KEY_CACHE_SECONDS``.
Removing a person disables them and removes every binding they hold (tenant bindings
through ``policy_set``, so etags and the last-admin rule hold); the principal row stays,
and with it every audit event that names it.
"""

from __future__ import annotations

import secrets

from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import diff, model_snapshot
from controlplane.errors import Conflict, ValidationFailed
from identity.models import ExternalIdentity, MappedBinding
from tenants.actor import Actor
from tenants.models import ApiKey, Principal, RoleBinding, Tenant
from tenants.services.iam import BindingSpec, policy_get, policy_set
from tenants.services.keys import key_cache


class SelfLockout(Conflict):
    """A platform admin tried to disable or remove their own account."""

    code = "cannot_disable_self"


def person_sessions_end(*, actor: Actor, principal: Principal) -> int:
    """Delete every console session of ``principal`` ("sign out everywhere"); audited
    ``identity.principal.sessions_end`` with the count. Returns how many ended."""
    # Database sessions are not indexed by user: a scan of the live ones, decoded. The
    # console's sessions number in the thousands at most.
    mine = [
        session.session_key
        for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator()
        if str(session.get_decoded().get(SESSION_KEY)) == str(principal.pk)
    ]
    with transaction.atomic():
        Session.objects.filter(session_key__in=mine).delete()
        audit_record(
            actor=actor,
            action="identity.principal.sessions_end",
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            details={"sessions": len(mine)},
        )
    return len(mine)


def _keys_forget(principal: Principal) -> None:
    # all_tenants: a person's own keys, across the tenants they were issued in
    digests = list(
        ApiKey.objects.all_tenants().filter(principal=principal).values_list("digest", flat=True)
    )
    for digest in digests:
        key_cache.forget(digest)


def person_set_active(*, actor: Actor, principal: Principal, active: bool) -> Principal:
    """Disable (``active=False``) or re-enable a person; audited
    ``identity.principal.disable`` / ``.enable``. Disabling ends their sessions and keys at
    once (see the module). Raises SelfLockout for one's own account."""
    if not active and actor.principal is not None and actor.principal.pk == principal.pk:
        raise SelfLockout("You cannot disable your own account.")
    with transaction.atomic():
        locked = Principal.objects.select_for_update().get(pk=principal.pk)
        before = model_snapshot(locked)
        locked.is_active = active
        locked.save(update_fields=["is_active"])
        audit_record(
            actor=actor,
            action="identity.principal.enable" if active else "identity.principal.disable",
            tenant=None,
            target_type="principal",
            target_id=str(locked.pk),
            changes=diff(before, model_snapshot(locked)),
        )
        if not active:
            transaction.on_commit(lambda: _keys_forget(locked))
    if not active:
        person_sessions_end(actor=actor, principal=locked)
    return locked


def person_remove(*, actor: Actor, principal: Principal) -> Principal:
    """Disable ``principal`` and remove every binding it holds (history kept).

    Tenant bindings go through ``policy_set`` (audited per tenant; the last-admin rule
    raises LastTenantAdmin and nothing of that tenant changes); platform bindings are
    deleted and audited ``identity.principal.remove``.
    """
    person_set_active(actor=actor, principal=principal, active=False)
    tenant_ids = set(
        RoleBinding.objects.filter(principal=principal, tenant__isnull=False).values_list(
            "tenant_id", flat=True
        )
    )
    for tenant in Tenant.objects.filter(pk__in=tenant_ids).order_by("slug"):
        policy = policy_get(tenant=tenant)
        policy_set(
            actor=actor,
            tenant=tenant,
            etag=policy.etag,
            bindings=[
                BindingSpec(
                    role=b.role.name, principal_id=str(b.principal_id), expires_at=b.expires_at
                )
                for b in policy.bindings
                if b.principal_id != principal.pk
            ],
            details={"reason": "principal_removed", "principal": str(principal.pk)},
        )
    with transaction.atomic():
        platform = list(
            RoleBinding.objects.filter(principal=principal, tenant__isnull=True)
            .select_related("role")
            .values_list("role__name", flat=True)
        )
        RoleBinding.objects.filter(principal=principal, tenant__isnull=True).delete()
        MappedBinding.objects.filter(principal=principal).delete()
        Principal.objects.filter(pk=principal.pk).update(removed_at=timezone.now())
        ExternalIdentity.objects.filter(principal=principal).update(groups=[])
        audit_record(
            actor=actor,
            action="identity.principal.remove",
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            details={"tenants": len(tenant_ids), "platform_roles": platform},
        )
    return principal


def person_password_reset(
    *, actor: Actor, username: str, password: str | None = None
) -> tuple[Principal, str]:
    """Set a new password for the human ``username`` (generated when None); audited
    ``identity.principal.password_reset`` (the password never in the row). Sessions opened
    with the old password end (Django ties them to the password hash).

    Raises ValidationFailed (no such human, or a password under 12 characters).
    """
    principal = Principal.objects.filter(username=username, kind="human").first()
    if principal is None:
        raise ValidationFailed(f"No person named {username!r}.", details={"field": "username"})
    chosen = password or secrets.token_urlsafe(18)
    if len(chosen) < 12:
        raise ValidationFailed("Passwords are at least 12 characters.")
    with transaction.atomic():
        principal.set_password(chosen)
        principal.save(update_fields=["password"])
        audit_record(
            actor=actor,
            action="identity.principal.password_reset",
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            details={"generated": password is None},
        )
    return principal, chosen
