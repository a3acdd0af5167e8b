"""The request log: a tenant's recent gateway requests from the usage ledger, filtered
by key, model, status and time range and keyset-paged. The chart's spend bars link here
with the bar's time range (``?since=…&until=…``).

Access is the one boundary's (``tenant_page("usage.get")``); reads are
``frontend.selectors.requests``'.
"""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone

from billing.models import UsageStatus
from frontend.requests import TenantPageRequest
from frontend.selectors.requests import (
    RequestLogFilters,
    request_log_keys,
    request_log_models,
    request_log_page,
)
from frontend.views import _context, tenant_page
from frontend.views_history import _utc


@tenant_page("usage.get")
def request_log(request: TenantPageRequest) -> HttpResponse:
    """The tenant's requests, newest first (no prompt content: the ledger holds none)."""
    get = request.GET
    status = get.get("status", "").strip()
    filters = RequestLogFilters(
        key=get.get("key", "").strip()[:40],
        model=get.get("model", "").strip()[:200],
        status=status if status in UsageStatus.values else "",
        since=_utc(get.get("since", "")[:40]),
        until=_utc(get.get("until", "")[:40]),
    )
    page = request_log_page(
        tenant=request.tenant, filters=filters, cursor=get.get("after", "")[:80]
    )
    older = None
    if page.next_cursor:
        query = get.copy()
        query["after"] = page.next_cursor
        older = f"?{query.urlencode()}"
    newest = get.copy()
    newest.pop("after", None)
    return render(
        request,
        "frontend/requests.html",
        _context(
            request,
            tenant=request.tenant,
            raw=get,
            rows=page.rows,
            older=older,
            newest=f"?{newest.urlencode()}" if "after" in get else None,
            keys=request_log_keys(tenant=request.tenant),
            models=request_log_models(
                tenant=request.tenant, since=timezone.now() - timedelta(days=31)
            ),
            statuses=UsageStatus.choices,
        ),
    )
