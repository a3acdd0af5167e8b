"""Audit rows for the life of a console session: logout, login lockout, CSRF refusals.

Each function writes one event in its own transaction (a savepoint when the caller has
one open) on the platform chain: these happen before any tenant is resolved, and the
principal, not a tenant, is what they are about. Called by thin adapters:
``audit.signals`` (Django and django-axes signals) and ``audit.http`` (the CSRF views).
"""

from __future__ import annotations

from django.db import transaction

from audit.models import AuditEvent, Outcome
from audit.services import audit_record
from tenants.actor import Actor


def session_logout_record(*, actor: Actor) -> AuditEvent:
    """``tenants.session.logout``: the principal ended its console session."""
    with transaction.atomic():
        return audit_record(
            actor=actor,
            action="tenants.session.logout",
            tenant=None,
            target_type="principal",
            target_id=actor.principal_id or "",
        )


def session_lockout_record(
    *, actor: Actor, username: str, failure_limit: int, cool_off_seconds: int
) -> AuditEvent:
    """``tenants.session.lockout`` (denied): a login refused because of repeated failures.

    Written when the lock engages and for every attempt made while it holds.
    """
    with transaction.atomic():
        return audit_record(
            actor=actor,
            action="tenants.session.lockout",
            tenant=None,
            outcome=Outcome.DENIED,
            target_type="principal",
            target_id=username[:150],
            details={"failure_limit": failure_limit, "cool_off_seconds": cool_off_seconds},
        )


def csrf_failure_record(
    *, actor: Actor, surface: str, method: str, path: str, reason: str, origin: str, referer: str
) -> AuditEvent:
    """``tenants.session.csrf_failure`` (denied): a session request without a valid token.

    ``surface`` is ``console`` (Django's CSRF middleware) or ``api`` (DRF's session
    authentication). Origin and Referer are kept (scrubbed like every value): they say
    which site tried to ride the session.
    """
    with transaction.atomic():
        return audit_record(
            actor=actor,
            action="tenants.session.csrf_failure",
            tenant=None,
            outcome=Outcome.DENIED,
            target_type="page" if surface == "console" else "api",
            target_id=path[:200],
            details={
                "surface": surface,
                "method": method[:16],
                "reason": reason[:200],
                "origin": origin[:200],
                "referer": referer[:300],
            },
        )
