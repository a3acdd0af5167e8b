"""Audit console logins and failed logins (Django auth signals)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from audit.models import Outcome
from audit.services import audit_record
from tenants.actor import Actor, AuthMethod, client_ip
from tenants.models import Principal
from tenants.services.failures import (
    failure_coalesced_record,
    login_failure_count,
    login_source_lockout_seconds,
)


@receiver(user_logged_in)
def _audit_login(sender: object, request: HttpRequest, user: Principal, **kwargs: Any) -> None:
    audit_record(
        actor=Actor.from_request(request, principal=user),
        action="tenants.session.login",
        tenant=None,
        target_type="principal",
        target_id=str(user.pk),
    )


@receiver(user_login_failed)
def _audit_login_failed(
    sender: object,
    credentials: dict[str, Any],
    request: HttpRequest | None = None,
    **kwargs: Any,
) -> None:
    actor = Actor(
        principal=None,
        auth_method=AuthMethod.SESSION,
        source_ip=client_ip(request) if request is not None else None,
        user_agent=request.headers.get("User-Agent", "")[:300] if request is not None else "",
    )
    if request is not None and not login_source_lockout_seconds(source_ip=actor.source_ip):
        login_failure_count(actor=actor)
    # Coalesced per source (tenants.services.failures): random usernames cannot flood the
    # chain; the row names the last username tried and how many failures it stands for.
    failure_coalesced_record(
        kind="login-failed",
        actor=actor,
        action="tenants.session.login",
        outcome=Outcome.FAILED,
        target_type="principal",
        target_id=str(credentials.get("username", ""))[:150],
        details={"reason": "invalid_credentials"},
    )
