"""A person's console sessions: listed, ended one by one, or all at once.

Django keeps sessions in the database, keyed by a secret (the cookie value). The list
never shows that key: each session is named by ``session_id`` (the first 32 hex digits
of the key's SHA-256), which is enough to end it and useless as a cookie. At sign-in the
session records when and from where it was opened (``SESSION_FACTS``; set by the
``user_logged_in`` receiver below), so the list can tell sessions apart.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import BACKEND_SESSION_KEY, SESSION_KEY
from django.contrib.auth.signals import user_logged_in
from django.contrib.sessions.models import Session
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone

from audit.services import audit_record
from controlplane.errors import NotFound
from tenants.actor import Actor
from tenants.authentication import http_source
from tenants.models import Principal

SESSION_FACTS = "identity.session"


@receiver(user_logged_in)
def _session_facts(sender: object, request: HttpRequest, user: Principal, **kwargs: Any) -> None:
    if request is None or not hasattr(request, "session"):
        return
    source = http_source(request)
    request.session[SESSION_FACTS] = {
        "opened_at": timezone.now().isoformat(),
        "ip": source.ip or "",
        "user_agent": source.user_agent[:200],
    }


def session_id(session_key: str) -> str:
    """The public name of a session (see the module)."""
    return hashlib.sha256(session_key.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    opened_at: str | None
    expires_at: datetime
    ip: str
    user_agent: str
    method: str
    current: bool


def _sessions_of(principal: Principal) -> list[tuple[Session, dict[str, Any]]]:
    # Database sessions are not indexed by user: a scan of the live ones, decoded (the
    # console's sessions number in the thousands at most).
    found = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        data = session.get_decoded()
        if str(data.get(SESSION_KEY)) == str(principal.pk):
            found.append((session, data))
    return found


def person_session_list(
    *, principal: Principal, current_key: str | None = None
) -> list[SessionInfo]:
    """``principal``'s live sessions, newest first; ``current`` marks the caller's own."""
    rows = []
    for session, data in _sessions_of(principal):
        facts = data.get(SESSION_FACTS) or {}
        backend = str(data.get(BACKEND_SESSION_KEY, ""))
        rows.append(
            SessionInfo(
                session_id=session_id(session.session_key),
                opened_at=facts.get("opened_at"),
                expires_at=session.expire_date,
                ip=str(facts.get("ip", "")),
                user_agent=str(facts.get("user_agent", "")),
                method="sso" if backend.endswith("SsoSessionBackend") else "password",
                current=session.session_key == current_key,
            )
        )
    rows.sort(key=lambda row: row.opened_at or "", reverse=True)
    return rows


def person_session_end(*, actor: Actor, principal: Principal, session: str) -> None:
    """End one session of ``principal`` by its ``session_id``; audited
    ``identity.principal.session_end``. Raises NotFound (no such live session)."""
    match = [s for s, _ in _sessions_of(principal) if session_id(s.session_key) == session]
    if not match:
        raise NotFound("No such session.")
    with transaction.atomic():
        Session.objects.filter(session_key=match[0].session_key).delete()
        audit_record(
            actor=actor,
            action="identity.principal.session_end",
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            details={"session": session},
        )
