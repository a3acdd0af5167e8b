"""Investigation pages: every object's History (its audit events with actor, time and a
rendered before/after diff) and the platform audit log, filtered and keyset-paged.

Thin adapters over ``audit.event_pages``; access is the one boundary's (``tenant_page``
/ ``platform_page``): a tenant's object history needs ``audit.export`` in that tenant,
the platform's pages ``audit.export_platform``.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils.dateparse import parse_datetime

from audit.event_pages import (
    AuditPageFilters,
    audit_event_page_all_tenants,
    audit_object_history,
    change_rows,
)
from audit.models import AuditEvent
from frontend.requests import PlatformPageRequest, TenantPageRequest
from frontend.views import _context, platform_page, tenant_page

#: Object kinds with a History (the audit events' ``target_type``) and how to name them.
KINDS = {
    "tenant": "Tenant",
    "principal": "Person or service account",
    "api_key": "API key",
    "iam_policy": "Binding policy",
    "role": "Role",
    "cache": "Cache",
    "budget": "Budget",
    "rate_limit": "Rate limit",
    "modelprice": "Model price",
    "poolprice": "Pool price",
    "worker": "Worker",
    "provider_credential": "Provider key",
}


def _utc(value: str) -> Any:
    """A ``datetime-local`` value (the page's inputs are UTC) as an aware datetime."""
    from datetime import UTC

    moment = parse_datetime(value) if value else None
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def _rows(events: list[AuditEvent], *, tenant_slug: str | None) -> list[dict[str, Any]]:
    """Events with their diff rows and the links to their actor and target by name."""
    rows = []
    for event in events:
        slug = event.tenant.slug if event.tenant_id and event.tenant else tenant_slug
        rows.append(
            {
                "event": event,
                "changes": change_rows(event),
                "actor_link": _history_url(slug, "principal", event.actor_id)
                if event.actor_id
                else None,
                "target_link": _target_url(slug, event.target_type, event.target_id),
                "target_name": _target_name(event),
            }
        )
    return rows


def _history_url(slug: str | None, kind: str, ident: str | None) -> str | None:
    if not ident or kind not in KINDS:
        return None
    if slug and kind != "tenant":
        return f"/t/{slug}/history/{kind}/{ident}/"
    return f"/platform/history/{kind}/{ident}/"


def _target_url(slug: str | None, kind: str, ident: str) -> str | None:
    if kind == "cache" and slug:
        return f"/t/{slug}/caches/{ident}/"
    return _history_url(slug, kind, ident)


def _target_name(event: AuditEvent) -> str:
    """The target's name where the event recorded one (its diff or details), else its id."""
    for source in (event.changes, event.details):
        if isinstance(source, dict):
            for field in ("name", "username", "slug", "model", "pool"):
                value = source.get(field)
                if isinstance(value, dict):
                    value = value.get("after") or value.get("before")
                if isinstance(value, str) and value:
                    return value
    label = KINDS.get(event.target_type, event.target_type or "—")
    return f"{label} {event.target_id[:8]}" if event.target_id else label


@tenant_page("audit.export")
def object_history(request: TenantPageRequest, target_type: str, target_id: str) -> HttpResponse:
    """History of one of this tenant's objects (404 for an unknown kind)."""
    if target_type not in KINDS:
        raise Http404("No such kind of object.")
    events = audit_object_history(
        tenant=request.tenant, target_type=target_type, target_id=target_id
    )
    if target_type == "tenant" and target_id == str(request.tenant.pk):
        # This tenant's own renames and suspensions are written in the platform chain.
        events += audit_object_history(tenant=None, target_type="tenant", target_id=target_id)
        events.sort(key=lambda e: (e.occurred_at, e.pk), reverse=True)
    return render(
        request,
        "frontend/history.html",
        _context(
            request,
            tenant=request.tenant,
            kind=KINDS[target_type],
            target_id=target_id,
            rows=_rows(events, tenant_slug=request.tenant.slug),
        ),
    )


@platform_page("audit.export_platform")
def platform_object_history(
    request: PlatformPageRequest, target_type: str, target_id: str
) -> HttpResponse:
    """History of a platform object: a tenant, a person, a price, a worker."""
    if target_type not in KINDS:
        raise Http404("No such kind of object.")
    events = audit_object_history(tenant=None, target_type=target_type, target_id=target_id)
    if target_type == "tenant":  # a tenant's own changes are written in its chain too
        from tenants.models import Tenant

        tenant = Tenant.objects.filter(pk=target_id).first() if _is_uuid(target_id) else None
        if tenant is not None:
            events += audit_object_history(
                tenant=tenant, target_type=target_type, target_id=target_id
            )
            events.sort(key=lambda e: (e.occurred_at, e.pk), reverse=True)
    return render(
        request,
        "frontend/history.html",
        _context(
            request,
            kind=KINDS[target_type],
            target_id=target_id,
            rows=_rows(events, tenant_slug=None),
        ),
    )


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


@platform_page("audit.export_platform")
def platform_audit(request: PlatformPageRequest) -> HttpResponse:
    """Every tenant's and the platform's audit events: filters and keyset paging."""
    get = request.GET
    filters = AuditPageFilters(
        actor=get.get("actor", "").strip()[:200],
        action=get.get("action", "").strip()[:100],
        target=get.get("target", "").strip()[:260],
        outcome=get.get("outcome", "").strip()[:16],
        tenant=get.get("tenant", "").strip()[:40],
        since=_utc(get.get("since", "")),
        until=_utc(get.get("until", "")),
    )
    page = audit_event_page_all_tenants(filters=filters, cursor=get.get("after", "")[:80])
    older = None
    if page.next_cursor:
        query = get.copy()
        query["after"] = page.next_cursor
        older = f"?{query.urlencode()}"
    return render(
        request,
        "frontend/platform_audit.html",
        _context(
            request,
            filters=filters,
            raw=get,
            rows=_rows(page.events, tenant_slug=None),
            older=older,
            first_page="after" not in get,
        ),
    )
