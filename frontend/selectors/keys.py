"""The keys page's read model: each key with its spend this period, the budgets and rate
limits that apply to it, when it was last used and which models it may call."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q, Sum

from frontend.selectors.common import budget_display_rows, month_bounds, usd
from tenants.models import ApiKey, RoleBinding, Tenant


def _limits_text(limit: Any) -> str:
    parts = []
    if limit.requests_per_minute:
        parts.append(f"{limit.requests_per_minute:,} req/min")
    if limit.tokens_per_minute:
        parts.append(f"{limit.tokens_per_minute:,} tok/min")
    if limit.concurrent_requests:
        parts.append(f"{limit.concurrent_requests:,} at once")
    return ", ".join(parts) or "unlimited"


def key_rows(*, tenant: Tenant, now: datetime, limit: int = 500) -> list[dict[str, Any]]:
    """Newest first, at most ``limit`` keys, in six queries whatever their number."""
    from billing.models import UsageRecord
    from billing.selectors.budgets import budget_list
    from gateway.models import RateLimit

    keys = list(
        ApiKey.objects.filter(tenant=tenant)
        .select_related("principal")
        .order_by("-created_at")[:limit]
    )
    start, _ = month_bounds(now)
    spend = dict(
        UsageRecord.objects.filter(
            tenant=tenant, occurred_at__gte=start, api_key_id__in=[k.pk for k in keys]
        )
        .values("api_key_id")
        .annotate(c=Sum("cost_micros"))
        .values_list("api_key_id", "c")
    )
    limits = list(
        RateLimit.objects.filter(tenant=tenant).filter(
            Q(api_key__isnull=True) | Q(api_key_id__in=[k.pk for k in keys])
        )
    )
    tenant_limit = next((r for r in limits if r.api_key_id is None), None)
    key_limit = {r.api_key_id: r for r in limits if r.api_key_id is not None}
    budgets = list(budget_list(tenant=tenant)[:50])
    figures = dict(
        zip(
            [b.pk for b in budgets],
            budget_display_rows(tenant=tenant, budgets=budgets, at=now),
            strict=True,
        )
    )
    # Holders bound to any live role here or platform-wide (one query): the others'
    # keys authenticate but may call nothing.
    bound = set(
        RoleBinding.objects.filter(
            Q(tenant=tenant) | Q(tenant__isnull=True),
            principal_id__in={k.principal_id for k in keys},
        )
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .values_list("principal_id", flat=True)
    )
    rows = []
    for key in keys:
        holder = key.principal
        applicable = [
            figures[b.pk] for b in budgets if b.principal_id is None or b.principal_id == holder.pk
        ]
        own = key_limit.get(key.pk)
        active = key.revoked_at is None and (key.expires_at is None or key.expires_at > now)
        rows.append(
            {
                "key": key,
                "active": active,
                "spend_usd": usd(int(spend.get(key.pk) or 0)),
                "budgets": applicable,
                "key_limit": _limits_text(own) if own else None,
                "tenant_limit": _limits_text(tenant_limit) if tenant_limit else None,
                "models": "every model of the tenant" if holder.pk in bound else "none: no role",
            }
        )
    return rows
