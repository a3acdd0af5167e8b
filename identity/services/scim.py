"""SCIM 2.0 provisioning: the IdP's token, and what its calls change here.

The protocol (routes, filters, PATCH operations, the SCIM JSON) is django-scim2's
(``identity.scim``); every change it asks for lands in a service here, with the actor
``AuthMethod.SCIM`` (``key_id`` = the SCIM token's id) so the audit log shows the IdP as
the author:

* **Users**: create (``tenants.principal.create``), update (``identity.scim.user.update``),
  deactivate / re-activate (``identity.people.person_set_active``: sessions end and the
  person's own API keys are refused at once, other processes' key caches expire within
  ``KEY_CACHE_SECONDS``), delete (``identity.people.person_remove``: disabled, bindings
  removed, ``removed_at`` set; the row and its history stay, SCIM answers 404 after).
* **Groups**: create, rename, delete and member changes (``identity.scim.group.*``). Every
  member whose groups changed is reconciled with ``bindings_reconcile``: the same group →
  role mappings, IAM service and etag rules as a single sign-on login.

Tokens: ``scim_token_create`` returns the secret once; only its SHA-256 digest is stored
(``ScimToken.digest``). A wrong or revoked token is refused and audited
(``identity.scim.authenticate``, failed, coalesced per source like other credential
failures).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import EMPTY, Changes, diff, model_snapshot
from controlplane.errors import NotFound, ValidationFailed
from identity.models import ExternalIdentity, ScimGroup, ScimToken
from identity.services.mappings import bindings_reconcile, principal_groups
from identity.services.people import person_remove, person_set_active
from tenants.actor import Actor, AuthMethod
from tenants.errors import DuplicateName
from tenants.models import Principal, PrincipalKind

TOKEN_PREFIX = "cpscim_"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class IssuedScimToken:
    token: ScimToken
    plaintext: str


def scim_token_create(*, actor: Actor, name: str) -> IssuedScimToken:
    """A new SCIM bearer token (the plaintext is returned once, never stored);
    audited ``identity.scim_token.create``."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValidationFailed("A token name is 1-100 characters.", details={"field": "name"})
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ScimToken.objects.create(
            name=name,
            prefix=plaintext[:12],
            digest=_digest(plaintext),
            created_by=actor.principal,
        )
        audit_record(
            actor=actor,
            action="identity.scim_token.create",
            tenant=None,
            target_type="scim_token",
            target_id=str(token.pk),
            details={"name": name, "prefix": token.prefix},
        )
    return IssuedScimToken(token=token, plaintext=plaintext)


def scim_token_revoke(*, actor: Actor, token_id: str) -> ScimToken:
    """Revoke a SCIM token (refused from the next call on); audited
    ``identity.scim_token.revoke``. Raises NotFound."""
    with transaction.atomic():
        token = ScimToken.objects.select_for_update().filter(pk=token_id).first()
        if token is None:
            raise NotFound("No such SCIM token.")
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            action="identity.scim_token.revoke",
            tenant=None,
            target_type="scim_token",
            target_id=str(token.pk),
        )
    return token


def scim_token_authenticate(presented: str) -> ScimToken | None:
    """The live token whose digest matches ``presented``, or None."""
    if not presented.startswith(TOKEN_PREFIX) or len(presented) > 200:
        return None
    token = ScimToken.objects.filter(digest=_digest(presented), revoked_at__isnull=True).first()
    if token is not None:
        ScimToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def scim_actor(*, token: ScimToken, source_ip: str | None, user_agent: str) -> Actor:
    """The IdP, acting through ``token``."""
    return Actor(
        principal=None,
        auth_method=AuthMethod.SCIM,
        key_id=str(token.pk),
        source_ip=source_ip,
        user_agent=user_agent or f"scim:{token.name}"[:300],
    )


# --- Users ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ScimUserFields:
    username: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    active: bool = True
    external_id: str = ""


def _check(fields: ScimUserFields) -> None:
    if not fields.username or len(fields.username) > 150:
        raise ValidationFailed("userName is 1-150 characters.", details={"field": "userName"})


def scim_user_create(*, actor: Actor, fields: ScimUserFields) -> Principal:
    """Provision a person (no password: they sign in with SSO). Raises DuplicateName."""
    from tenants.services.tenants import human_principal_create

    _check(fields)
    with transaction.atomic():
        person = human_principal_create(
            actor=actor, username=fields.username, password=None, email=fields.email
        )
        person.first_name, person.last_name = fields.first_name[:150], fields.last_name[:150]
        person.is_active = fields.active
        person.save(update_fields=["first_name", "last_name", "is_active"])
    return person


def scim_user_update(*, actor: Actor, person: Principal, fields: ScimUserFields) -> Principal:
    """Apply the IdP's view of a person; ``active`` goes through ``person_set_active``."""
    _check(fields)
    with transaction.atomic():
        locked = Principal.objects.select_for_update().get(pk=person.pk)
        before = model_snapshot(locked)
        locked.username, locked.email = fields.username, fields.email[:254]
        locked.first_name, locked.last_name = fields.first_name[:150], fields.last_name[:150]
        try:
            with transaction.atomic():
                locked.save(update_fields=["username", "email", "first_name", "last_name"])
        except IntegrityError:
            raise DuplicateName(f"A principal named {fields.username!r} exists.") from None
        changes = diff(before, model_snapshot(locked))
        if changes:
            audit_record(
                actor=actor,
                action="identity.scim.user.update",
                tenant=None,
                target_type="principal",
                target_id=str(locked.pk),
                changes=changes,
            )
    if locked.is_active != fields.active:
        locked = person_set_active(actor=actor, principal=locked, active=fields.active)
    return locked


def scim_user_delete(*, actor: Actor, person: Principal) -> None:
    """Deprovision: disable, remove every binding and SCIM membership; history stays."""
    with transaction.atomic():
        groups = list(person.scim_groups.all())
        for group in groups:
            group.members.remove(person)
    person_remove(actor=actor, principal=person)


def scim_people() -> QuerySet[Principal]:
    """People SCIM sees: humans not removed (platform-wide: provisioning is platform
    configuration, not a tenant's data)."""
    return Principal.objects.filter(kind=PrincipalKind.HUMAN, removed_at__isnull=True)


# --- Groups ---------------------------------------------------------------------------


def _reconcile(actor: Actor, principals: Iterable[Principal]) -> None:
    for principal in principals:
        if not principal.is_active:
            continue
        identity = ExternalIdentity.objects.filter(principal=principal).first()
        asserted = identity.groups if identity is not None else []
        bindings_reconcile(
            principal=principal,
            groups=principal_groups(principal, asserted),
            source_ip=actor.source_ip,
            user_agent=actor.user_agent,
            actor=actor,
        )


def _group_audit(
    actor: Actor, group: ScimGroup, verb: str, changes: Changes | None = None, **details: Any
) -> None:
    audit_record(
        actor=actor,
        action=f"identity.scim.group.{verb}",
        tenant=None,
        target_type="scim_group",
        target_id=str(group.pk),
        changes=changes,
        details={"display_name": group.display_name, **details},
    )


def scim_group_save(
    *,
    actor: Actor,
    group: ScimGroup | None,
    display_name: str,
    external_id: str = "",
    members: list[Principal] | None = None,
) -> ScimGroup:
    """Create (``group`` None) or update a group; ``members`` None keeps the members.
    Members whose groups changed (and, on a rename, every member) are reconciled."""
    display_name = (display_name or "").strip()
    if not display_name or len(display_name) > 255:
        raise ValidationFailed("displayName is 1-255 characters.", details={"field": "displayName"})
    with transaction.atomic():
        creating = group is None
        target = (
            ScimGroup() if group is None else ScimGroup.objects.select_for_update().get(pk=group.pk)
        )
        before = EMPTY if creating else model_snapshot(target)
        renamed = not creating and target.display_name != display_name
        target.display_name, target.external_id = display_name, external_id[:255]
        try:
            with transaction.atomic():
                target.save()
        except IntegrityError:
            raise DuplicateName(f"A group named {display_name!r} exists.") from None
        old = set() if creating else set(target.members.all())
        touched: set[Principal] = set(old) if renamed else set()
        if members is not None:
            new = set(members)
            target.members.set(new)
            touched |= new ^ old
            added, gone = (
                sorted(p.username for p in new - old),
                sorted(p.username for p in old - new),
            )
        else:
            added, gone = [], []
        _group_audit(
            actor,
            target,
            "create" if creating else "update",
            changes=diff(before, model_snapshot(target)),
            added=added[:100],
            removed=gone[:100],
        )
    _reconcile(actor, sorted(touched, key=lambda p: p.username))
    return target


def scim_group_members_change(
    *, actor: Actor, group: ScimGroup, add: list[Principal], remove: list[Principal]
) -> ScimGroup:
    """PATCH add/remove members; audited and reconciled like ``scim_group_save``."""
    current = set(group.members.all())
    wanted = (current | set(add)) - set(remove)
    return scim_group_save(
        actor=actor,
        group=group,
        display_name=group.display_name,
        external_id=group.external_id,
        members=list(wanted),
    )


def scim_group_delete(*, actor: Actor, group: ScimGroup) -> None:
    """Delete a group; its former members are reconciled (their mapped bindings go)."""
    with transaction.atomic():
        members = list(group.members.all())
        _group_audit(actor, group, "delete", members=len(members))
        group.delete()
    _reconcile(actor, members)
