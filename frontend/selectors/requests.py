"""The request log's read model: a tenant's recent gateway requests from the usage ledger
(counts, cost, latency, status, where each was routed and what the cache autopilot did;
never prompt content),
filtered by key, model, status and time range, keyset-paged on ``(occurred_at, id)``.

The ledger is read through ``billing.selectors.usage_list`` (tenant-scoped); the key
names come from the tenant's own keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import Q
from django.utils.dateparse import parse_datetime

from billing.selectors import usage_list
from tenants.models import ApiKey, Tenant

PAGE_SIZE = 50
NANOS_PER_USD = 1_000_000_000


@dataclass(frozen=True)
class RequestLogFilters:
    """The request log's filters (all optional; combined with AND)."""

    key: str = ""  # an API key's id
    model: str = ""
    status: str = ""
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class RequestLogPage:
    rows: list[dict[str, Any]]
    next_cursor: str | None


def _cursor_decode(cursor: str) -> tuple[datetime, int] | None:
    moment, _, pk = cursor.rpartition("_")
    at = parse_datetime(moment) if moment else None
    if at is None or not pk.isdigit():
        return None
    return at, int(pk)


#: ``UsageRecord.route`` modes in words (``gateway.routing``: exact from the KV-event
#: index, approximate from the character guess; a named cache goes where it is placed).
_ROUTE_MODES = {"exact": "exact", "approximate": "approximate", "cache": "by its cache"}


def _route(route: str) -> str:
    """How the request was placed (``mode:reason``), in words ("": not routed here)."""
    mode, _, reason = route.partition(":")
    if not mode:
        return ""
    words = _ROUTE_MODES.get(mode, mode)
    return f"{words} ({reason.replace('_', ' ')})" if reason else words


def _routing(row: Any) -> str:
    """Where the gateway sent the request, in words (the ledger's worker, pool, cache)."""
    parts = []
    if row.worker:
        parts.append(f"worker {row.worker}" + (f" (pool {row.pool})" if row.pool else ""))
    elif row.pool:
        parts.append(f"pool {row.pool}")
    else:
        parts.append(f"provider {row.provider}")
    if row.cache_id:
        parts.append(f"cache {row.cache_id[:12]}")
    if row.cached_read_tokens:
        parts.append("prefix reused")
    if row.route:
        parts.append("routed " + _route(row.route))
    return ", ".join(parts)


def _autopilot(decision: str) -> str:
    """The cache autopilot's decision (``UsageRecord.autopilot``) in words ("": it did
    not run for this request)."""
    if not decision:
        return ""
    if decision == "client":
        return "client's own breakpoints kept"
    reason = decision.removeprefix("none:")
    if reason != decision:
        return "no breakpoints (" + reason.replace("_", " ") + ")"
    if decision.startswith("prompt_cache_key:"):
        return "prompt_cache_key " + decision.removeprefix("prompt_cache_key:")
    return "breakpoints " + ", ".join(part.replace(":", " ") for part in decision.split(","))


def request_log_page(
    *, tenant: Tenant, filters: RequestLogFilters, cursor: str = "", size: int = PAGE_SIZE
) -> RequestLogPage:
    """One page of ``tenant``'s ledger rows, newest first, after ``cursor``; two queries
    (the rows, the names of their keys) whatever the page size."""
    qs = usage_list(
        tenant=tenant,
        since=filters.since,
        until=filters.until,
        model=filters.model or None,
    )
    if filters.key:
        try:
            qs = qs.filter(api_key_id=UUID(filters.key))
        except ValueError:
            qs = qs.none()
    if filters.status:
        qs = qs.filter(status=filters.status)
    after = _cursor_decode(cursor) if cursor else None
    if after is not None:
        at, pk = after
        qs = qs.filter(Q(occurred_at__lt=at) | Q(occurred_at=at, id__lt=pk))
    records = list(qs.order_by("-occurred_at", "-id")[: size + 1])
    more = len(records) > size
    records = records[:size]
    key_ids = {r.api_key_id for r in records if r.api_key_id}
    names = dict(
        ApiKey.objects.filter(tenant=tenant, pk__in=key_ids).values_list("pk", "name")
        if key_ids
        else []
    )
    rows = [
        {
            "record": r,
            "key_name": names.get(r.api_key_id, "") if r.api_key_id else "",
            "cost_usd": r.cost_nanos / NANOS_PER_USD,
            "routing": _routing(r),
            "autopilot": _autopilot(r.autopilot),
        }
        for r in records
    ]
    last = records[-1] if records else None
    next_cursor = f"{last.occurred_at.isoformat()}_{last.pk}" if more and last else None
    return RequestLogPage(rows=rows, next_cursor=next_cursor)


def request_log_keys(*, tenant: Tenant) -> list[tuple[str, str]]:
    """``(id, name)`` of the tenant's keys, for the key filter."""
    return [
        (str(pk), name)
        for pk, name in ApiKey.objects.filter(tenant=tenant)
        .order_by("name")
        .values_list("pk", "name")[:500]
    ]


def request_log_models(*, tenant: Tenant, since: datetime) -> list[str]:
    """The models the tenant's requests used since ``since``, for the model filter."""
    return sorted(
        set(usage_list(tenant=tenant, since=since).values_list("model", flat=True).distinct()[:200])
    )
