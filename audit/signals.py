"""Signal receivers that audit session events (connected in ``AuditConfig.ready``).

Logins and failed logins are audited in ``tenants.signals``; here: logouts and
django-axes lockouts. Thin adapters over ``audit.services.sessions``.
"""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from django.http import HttpRequest

from audit.services.sessions import session_lockout_record, session_logout_record
from tenants.actor import Actor
from tenants.models import Principal


@receiver(user_logged_out)
def _audit_logout(
    sender: object, request: HttpRequest | None, user: Principal | None, **kwargs: Any
) -> None:
    if user is None or request is None:
        return  # a logout without a session (already expired) ends nothing
    session_logout_record(actor=Actor.from_request(request, principal=user))


@receiver(user_locked_out)
def _audit_lockout(
    sender: object,
    request: HttpRequest | None,
    username: str | None = None,
    ip_address: str | None = None,
    **kwargs: Any,
) -> None:
    if request is None:
        return
    actor = Actor.from_request(request)
    session_lockout_record(
        actor=actor,
        username=str(username or ""),
        failure_limit=settings.AXES_FAILURE_LIMIT,
        cool_off_seconds=int(settings.AXES_COOLOFF_TIME.total_seconds()),
    )
