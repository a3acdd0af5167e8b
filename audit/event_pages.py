"""Reads of audit events for browsing: one object's history, and the platform's audit
log filtered and paged by keyset (``occurred_at``, ``id``), never by OFFSET, so page N
costs what page 1 costs over 10^6 events (``bench/audit_page.py``).

Selectors of the audit app (a module of its own beside ``audit.selectors``, which holds
the chain, export and digest reads).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime

from audit.models import AuditEvent
from tenants.models import Tenant

PAGE_SIZE = 50


def audit_object_history(
    *, tenant: Tenant | None, target_type: str, target_id: str, limit: int = 200
) -> list[AuditEvent]:
    """One object's audit events, newest first: in ``tenant`` (a tenant's object), or in
    the platform chain (``tenant=None``: tenants, prices, workers, people)."""
    qs = AuditEvent.objects.filter(target_type=target_type, target_id=target_id)
    qs = qs.filter(tenant=tenant) if tenant is not None else qs.filter(tenant__isnull=True)
    return list(qs.order_by("-occurred_at", "-id")[:limit])


@dataclass(frozen=True)
class AuditPageFilters:
    """The platform audit page's filters (all optional; combined with AND)."""

    actor: str = ""
    action: str = ""
    target: str = ""
    outcome: str = ""
    tenant: str = ""
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class AuditPage:
    events: list[AuditEvent]
    next_cursor: str | None


def cursor_encode(event: AuditEvent) -> str:
    return f"{event.occurred_at.isoformat()}_{event.pk}"


def cursor_decode(cursor: str) -> tuple[datetime, int] | None:
    """``(occurred_at, id)`` of a cursor, or None for a malformed one (page 1 then)."""
    moment, _, pk = cursor.rpartition("_")
    at = parse_datetime(moment) if moment else None
    if at is None or not pk.isdigit():
        return None
    return at, int(pk)


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _filtered_all_tenants(filters: AuditPageFilters) -> QuerySet[AuditEvent]:
    # all tenants: the platform audit page is for platform operators (tenants.list),
    # decided by its view through the one access boundary.
    q = Q()
    if filters.actor:
        # One column per value, never an OR across two: the OR defeated the
        # (actor_name, -occurred_at) index and cost a sort of every match (p95 1.5 s over
        # 10^6 events). A principal id is a UUID; anything else is a name.
        q &= Q(actor_id=filters.actor) if _is_uuid(filters.actor) else Q(actor_name=filters.actor)
    if filters.action:
        if filters.action.endswith("*"):
            q &= Q(action__startswith=filters.action[:-1])
        else:
            q &= Q(action=filters.action)
    if filters.target:
        kind, _, ident = filters.target.partition(":")
        q &= Q(target_type=kind, target_id=ident) if ident else Q(target_id=filters.target)
    if filters.outcome:
        q &= Q(outcome=filters.outcome)
    if filters.tenant:
        # The tenant's id first (one primary-key read), so the page is a range scan of
        # (tenant, occurred_at) instead of a join sorted afterwards.
        tenant_id = Tenant.objects.filter(slug=filters.tenant).values_list("pk", flat=True)
        q &= Q(tenant_id=next(iter(tenant_id), None))
    if filters.since is not None:
        q &= Q(occurred_at__gte=filters.since)
    if filters.until is not None:
        q &= Q(occurred_at__lt=filters.until)
    return AuditEvent.objects.filter(q)


def audit_event_page_all_tenants(
    *, filters: AuditPageFilters, cursor: str = "", size: int = PAGE_SIZE
) -> AuditPage:
    """One page of every tenant's and the platform's events, newest first, after
    ``cursor`` (keyset on ``(occurred_at, id)``: each page is one index range scan)."""
    qs = _filtered_all_tenants(filters).select_related("tenant")
    after = cursor_decode(cursor) if cursor else None
    if after is not None:
        at, pk = after
        qs = qs.filter(Q(occurred_at__lt=at) | Q(occurred_at=at, id__lt=pk))
    events = list(qs.order_by("-occurred_at", "-id")[: size + 1])
    more = len(events) > size
    events = events[:size]
    return AuditPage(events=events, next_cursor=cursor_encode(events[-1]) if more else None)


def change_rows(event: AuditEvent) -> list[dict[str, Any]]:
    """An event's before/after as rows for a rendered diff (secrets already redacted
    when the event was written)."""
    changes = event.changes if isinstance(event.changes, dict) else {}
    rows = []
    for field, change in sorted(changes.items()):
        if isinstance(change, dict):
            rows.append(
                {"field": field, "before": change.get("before"), "after": change.get("after")}
            )
    return rows
