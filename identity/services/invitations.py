"""Invitations: a person is created without a password and mailed a link to choose one.

The link carries Django's password-reset token for the invited principal
(``default_token_generator``): single use (it covers the password hash and the last
login, both change once it is used) and expiring (``PASSWORD_RESET_TIMEOUT``). Optional
roles are granted at once through ``policy_set`` (etag, escalation and last-admin rules;
audited ``tenants.policy.set``), so the person lands on their tenant at first sign-in.
An ``Invitation`` row keeps the pending state: accepted when the password is chosen,
revoked by a platform admin (the person is removed, and a fresh unusable password voids
the link). Every step is audited (``identity.invitation.create`` / ``.accept`` /
``.revoke``).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.tokens import default_token_generator
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from audit.services import audit_record
from controlplane.errors import Conflict, NotFound, ValidationFailed
from identity.models import Invitation
from identity.services.people import person_remove
from tenants.actor import Actor
from tenants.models import Principal, Tenant
from tenants.services.iam import BindingSpec, policy_get, policy_set

#: At most this many (tenant, role) grants in one invitation.
MAX_INVITE_ROLES = 20


class InvitationClosed(Conflict):
    """The invitation was already accepted or revoked."""

    code = "invitation_closed"


def invitation_link(*, principal: Principal, set_password_url: str) -> str:
    return set_password_url.format(
        uid=urlsafe_base64_encode(force_bytes(principal.pk)),
        token=default_token_generator.make_token(principal),
    )


def invitation_create(
    *,
    actor: Actor,
    username: str,
    email: str,
    set_password_url: str,
    roles: list[tuple[str, str]] | None = None,
) -> Invitation:
    """Invite ``username`` at ``email`` with optional ``roles`` ((tenant slug, role)).

    ``set_password_url`` is the absolute URL with ``{uid}`` and ``{token}`` placeholders.
    Raises DuplicateName, ValidationFailed (unknown tenant, too many roles), UnknownRole,
    EscalationDenied. The mail leaves after commit.
    """
    from tenants.services.tenants import human_principal_create

    grants = list(dict.fromkeys(roles or []))
    if len(grants) > MAX_INVITE_ROLES:
        raise ValidationFailed(f"At most {MAX_INVITE_ROLES} roles.", details={"field": "roles"})
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in={slug for slug, _ in grants})}
    unknown = sorted({slug for slug, _ in grants} - set(tenants))
    if unknown:
        raise ValidationFailed(f"Unknown tenant {unknown[0]!r}.", details={"field": "roles"})
    with transaction.atomic():
        principal = human_principal_create(
            actor=actor, username=username, password=None, email=email
        )
        for slug in sorted(tenants):
            policy = policy_get(tenant=tenants[slug])
            policy_set(
                actor=actor,
                tenant=tenants[slug],
                etag=policy.etag,
                bindings=[
                    BindingSpec(
                        role=b.role.name, principal_id=str(b.principal_id), expires_at=b.expires_at
                    )
                    for b in policy.bindings
                ]
                + [
                    BindingSpec(role=role, principal_id=str(principal.pk))
                    for s, role in grants
                    if s == slug
                ],
                details={"reason": "invitation", "principal": str(principal.pk)},
            )
        invitation = Invitation.objects.create(
            principal=principal,
            email=email[:254],
            roles=[list(grant) for grant in grants],
            created_by=actor.principal,
            expires_at=timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT),
        )
        audit_record(
            actor=actor,
            action="identity.principal.invite",
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            details={
                "email": email[:254],
                "roles": invitation.roles,
                "invitation": str(invitation.pk),
            },
        )
        link = invitation_link(principal=principal, set_password_url=set_password_url)
        transaction.on_commit(
            lambda: send_mail(
                "You are invited to Cacheplane",
                f"Choose your password to sign in as {username}: {link}\n"
                "The link works once and expires.",
                None,
                [email],
            )
        )
    return invitation


def invitation_list_pending() -> QuerySet[Invitation]:
    """Invitations neither accepted nor revoked (expired ones included, marked by
    ``expires_at``); platform configuration, all tenants."""
    return (
        Invitation.objects.filter(accepted_at__isnull=True, revoked_at__isnull=True)
        .select_related("principal", "created_by")
        .order_by("-created_at")
    )


def invitation_accepted(*, actor: Actor, principal: Principal) -> None:
    """Mark ``principal``'s pending invitation accepted (their first password is set)."""
    with transaction.atomic():
        updated = Invitation.objects.filter(
            principal=principal, accepted_at__isnull=True, revoked_at__isnull=True
        ).update(accepted_at=timezone.now())
        if updated:
            audit_record(
                actor=actor,
                action="identity.invitation.accept",
                tenant=None,
                target_type="principal",
                target_id=str(principal.pk),
            )


def invitation_revoke(*, actor: Actor, invitation_id: str) -> Invitation:
    """Revoke a pending invitation: its link stops working and the person is removed
    (bindings gone, history kept). Raises NotFound, InvitationClosed."""
    with transaction.atomic():
        try:
            invitation = Invitation.objects.select_for_update().get(pk=invitation_id)
        except (Invitation.DoesNotExist, ValueError, TypeError):
            raise NotFound("No such invitation.") from None
        if invitation.accepted_at or invitation.revoked_at:
            raise InvitationClosed("This invitation is already accepted or revoked.")
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        principal = Principal.objects.select_for_update().get(pk=invitation.principal_id)
        principal.set_unusable_password()  # a new hash: the emailed token no longer matches
        principal.save(update_fields=["password"])
        audit_record(
            actor=actor,
            action="identity.invitation.revoke",
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            details={"invitation": str(invitation.pk), "email": invitation.email},
        )
    person_remove(actor=actor, principal=principal)
    return invitation
