"""Read models for a tenant's console pages: the overview, a cache's page, its top caches.

Sections are included only when the principal holds the permission behind them, so a
page never shows (or a JSON refresh returns) what the caller may not read.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from caches.models import LIVE_STATES, CacheObject
from frontend.selectors.common import budget_display_rows, month_bounds, usd
from frontend.selectors.series import hit_series
from tenants.models import ApiKey, Principal, RoleBinding, Tenant
from tenants.services.authorization import principal_permissions


def tenant_spend_section(*, tenant: Tenant, now: datetime) -> dict[str, Any]:
    """Month-to-date spend, budget, projection to the end of the month, saved vs spent."""
    from billing.selectors.budgets import budget_list
    from billing.selectors.usage import savings_summary

    start, end = month_bounds(now)
    savings = savings_summary(tenant=tenant, since=start, until=now + timedelta(minutes=1))
    elapsed = max((now - start).total_seconds(), 60.0)
    projection = int(savings.spent_micros * (end - start).total_seconds() / elapsed)
    # The budgets' figures are the budgets page's and the API's (billing's one selector):
    # what the gateway counts against the limit, spent + reserved.
    budget_rows = budget_display_rows(
        tenant=tenant, budgets=list(budget_list(tenant=tenant)[:10]), at=now
    )
    return {
        "month_start": start.isoformat(),
        "month_end": end.isoformat(),
        "spent_usd": usd(savings.spent_micros),
        "storage_usd": usd(savings.storage_cost_micros),
        "without_cache_usd": usd(savings.cost_without_cache_micros),
        "saved_usd": usd(savings.saved_micros),
        "projected_usd": usd(projection),
        "requests": savings.requests,
        "hit_ratio": float(savings.hit_ratio),
        "budgets": budget_rows,
    }


def tenant_summary(*, tenant: Tenant, principal: Principal) -> dict[str, Any]:
    """Everything the tenant page shows, filtered by the principal's permissions."""
    held = principal_permissions(principal=principal, tenant=tenant)
    now = timezone.now()
    summary: dict[str, Any] = {
        "tenant": {
            "id": str(tenant.pk),
            "slug": tenant.slug,
            "name": tenant.display_name,
            "state": tenant.state,
        },
        "permissions": sorted(held),
        "generated_at": now.isoformat(),
    }
    if "caches.list" in held:
        caches = (
            CacheObject.objects.filter(tenant=tenant)
            .filter(Q(state__in=LIVE_STATES) | Q(ended_at__gte=now - timedelta(hours=24)))
            .order_by("-created_at")[:200]
        )
        summary["caches"] = [
            {
                "id": str(c.pk),
                "name": c.name,
                "provider": c.provider,
                "model": c.model,
                "state": c.state,
                "live": c.is_live,
                "expire_at": c.expire_at.isoformat() if c.expire_at else None,
                "ttl_policy": c.ttl_policy,
                "token_count": c.token_count,
                "hit_count": c.hit_count,
                "placement": c.placement,
            }
            for c in caches
        ]
    if "usage.get" in held:
        summary["spend"] = tenant_spend_section(tenant=tenant, now=now)
        summary["hit_series"] = hit_series(tenant_ids=[tenant.pk])
    if "budgets.get" in held:
        from billing.selectors.budgets import budget_alert_list

        summary["alerts"] = [
            {
                "id": str(a.pk),
                "budget": a.budget.name,
                "threshold": a.threshold,
                "at": a.created_at.isoformat(),
            }
            for a in budget_alert_list(tenant=tenant)[:10]
        ]
    if "iam.get" in held:
        bindings = RoleBinding.objects.filter(tenant=tenant).select_related("role", "principal")
        summary["members"] = [
            {
                "principal": b.principal.username,
                "kind": b.principal.kind,
                "role": b.role.name,
                "expires_at": b.expires_at.isoformat() if b.expires_at else None,
            }
            for b in bindings.order_by("principal__username")[:200]
        ]
        keys = ApiKey.objects.filter(tenant=tenant).select_related("principal")
        summary["keys"] = [
            {
                "id": str(k.pk),
                "name": k.name,
                "prefix": k.prefix,
                "principal": k.principal.username,
                "revoked": k.revoked_at is not None,
                "last_used_at": k.last_used_at.isoformat() if k.last_used_at else None,
            }
            for k in keys.order_by("-created_at")[:100]
        ]
    return summary


def cache_detail(*, tenant: Tenant, cache: CacheObject) -> dict[str, Any]:
    """A cache's page: facts, timeline, storage cost so far, break-even position."""
    from billing.models import StorageAccrual

    storage = StorageAccrual.objects.filter(tenant=tenant, cache_id=str(cache.pk)).aggregate(
        c=Coalesce(Sum("cost_micros"), 0)
    )["c"]
    timeline = [
        {"from": t.from_state, "to": t.to_state, "reason": t.reason, "at": t.at.isoformat()}
        for t in cache.transitions.order_by("at", "id")[:200]
    ]
    return {
        "id": str(cache.pk),
        "name": cache.name,
        "provider": cache.provider,
        "model": cache.model,
        "state": cache.state,
        # The caches app's own definition (refreshing included): the page and its live
        # updates keep the actions while the cache is live, and never decide it again.
        "live": cache.is_live,
        "ttl_policy": cache.ttl_policy,
        "ttl_seconds": cache.ttl_seconds,
        "expire_at": cache.expire_at.isoformat() if cache.expire_at else None,
        "token_count": cache.token_count,
        "hit_count": cache.hit_count,
        "hit_tokens": cache.hit_tokens,
        "query_rate_per_hour": round(cache.query_rate_ewma, 3),
        "storage_cost_usd": usd(storage),
        "placement": cache.placement,
        "pool": cache.pool,
        # vLLM residency: the last probe's cached tokens, and when a probe last found the
        # pinned prefix evicted (the page alerts while the cache lives).
        "resident_tokens": cache.resident_tokens,
        "resident_checked_at": (
            cache.resident_checked_at.isoformat() if cache.resident_checked_at else None
        ),
        "evicted_seen_at": cache.evicted_seen_at.isoformat() if cache.evicted_seen_at else None,
        "content_digest": cache.content_digest,
        "timeline": timeline,
        "prewarm_cron": cache.prewarm_cron,
    }


def tenant_top_caches(*, tenant: Tenant, limit: int = 5) -> dict[str, list[dict[str, Any]]]:
    """A tenant's caches this month by spend (requests through them plus storage) and by
    savings (what those requests would have cost uncached, less what they cost)."""
    from billing.models import StorageAccrual, UsageRecord

    start, _ = month_bounds(timezone.now())
    usage = {
        r["cache_id"]: r
        for r in UsageRecord.objects.filter(
            tenant=tenant, cache_id__isnull=False, occurred_at__gte=start
        )
        .values("cache_id")
        .annotate(cost=Sum("cost_micros"), without=Sum("cost_without_cache_micros"))
    }
    storage = dict(
        StorageAccrual.objects.filter(tenant=tenant, hour__gte=start)
        .values("cache_id")
        .annotate(c=Sum("cost_micros"))
        .values_list("cache_id", "c")
    )
    # No key is None: the ledger query skips rows without a cache, and a storage accrual
    # always names its cache (the stubs type a nullable column's values as optional).
    ids = {i for i in usage if i is not None} | set(storage)
    names = dict(
        CacheObject.objects.filter(
            tenant=tenant, pk__in=[u for u in (_as_uuid(i) for i in ids) if u is not None]
        ).values_list("pk", "name")
    )
    ranked: list[dict[str, Any]] = []
    for cid in ids:
        u = usage.get(cid) or {"cost": 0, "without": 0}
        key = _as_uuid(cid)
        ranked.append(
            {
                "id": cid,
                "name": names.get(key, cid) if key is not None else cid,
                "spend_usd": usd((u["cost"] or 0) + (storage.get(cid) or 0)),
                "saved_usd": usd(max(0, (u["without"] or 0) - (u["cost"] or 0))),
            }
        )
    return {
        "by_spend": sorted(ranked, key=lambda r: -r["spend_usd"])[:limit],
        "by_savings": sorted(ranked, key=lambda r: -r["saved_usd"])[:limit],
    }


def _as_uuid(value: str) -> uuid.UUID | None:
    """The cache id as a UUID, or None for a non-UUID id (a provider-side name)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        return None
