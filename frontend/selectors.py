"""Read models for the console pages: each function is a bounded number of queries.

Sections are included only when the principal holds the permission behind them, so a
page never shows (or a JSON refresh returns) what the caller may not read.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from caches.models import LIVE_STATES, CacheObject
from tenants.models import ApiKey, Principal, RoleBinding, Tenant
from tenants.services.authorization import principal_permissions


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def _usd(micros: int) -> float:
    return round(micros / 1_000_000, 6)


def hit_series(*, tenant_ids: list[Any] | None, minutes: int = 60) -> list[dict[str, Any]]:
    """Per-minute prompt and cached tokens (and spend) for the last ``minutes``."""
    from billing.models import Granularity, UsageRollup

    since = timezone.now() - timedelta(minutes=minutes)
    # all_tenants: platform overview spans tenants (callers hold tenants.list)
    rollups = UsageRollup.objects.all_tenants().filter(
        granularity=Granularity.MINUTE, bucket__gte=since
    )
    if tenant_ids is not None:
        rollups = rollups.filter(tenant_id__in=tenant_ids)
    rows = (
        rollups.values("bucket")
        .annotate(
            prompt=Sum("prompt_tokens"),
            cached=Sum("cached_read_tokens"),
            cost=Sum("cost_micros"),
            requests=Sum("requests"),
        )
        .order_by("bucket")
    )
    return [
        {
            "at": r["bucket"].isoformat(),
            "prompt_tokens": r["prompt"],
            "cached_tokens": r["cached"],
            "cost_usd": _usd(r["cost"]),
            "requests": r["requests"],
            "hit_rate": round(r["cached"] / r["prompt"], 4) if r["prompt"] else None,
        }
        for r in rows
    ]


def tenant_spend_section(*, tenant: Tenant, now: datetime) -> dict[str, Any]:
    """Month-to-date spend, budget, projection to the end of the month, saved vs spent."""
    from billing.selectors.budgets import budget_current_periods, budget_list
    from billing.selectors.usage import savings_summary

    start, end = month_bounds(now)
    savings = savings_summary(tenant=tenant, since=start, until=now + timedelta(minutes=1))
    elapsed = max((now - start).total_seconds(), 60.0)
    projection = int(savings.spent_micros * (end - start).total_seconds() / elapsed)
    budgets = list(budget_list(tenant=tenant)[:10])
    periods = budget_current_periods(tenant=tenant, budgets=budgets, at=now)
    budget_rows = []
    # One spend figure per page: a budget's meter here shows the ledger's spend over the
    # budget's current period (the same source and definition as "Spent this month"), so
    # the two never disagree while traffic runs. The figure the gateway enforces (settled
    # holds, a few seconds apart) is on the budgets page.
    ledger_since: dict[datetime, int] = {start: savings.spent_micros}
    for budget in budgets:
        period = periods.get(budget.pk)
        since = period.period_start if period else start
        if since not in ledger_since:
            ledger_since[since] = savings_summary(
                tenant=tenant, since=since, until=now + timedelta(minutes=1)
            ).spent_micros
        budget_rows.append(
            {
                "id": str(budget.pk),
                "name": budget.name,
                "period": budget.period,
                "hard_limit": budget.hard_limit,
                "limit_usd": _usd(budget.limit_micros),
                "spent_usd": _usd(ledger_since[since]),
                "reserved_usd": _usd(period.reserved_micros) if period else 0.0,
            }
        )
    return {
        "month_start": start.isoformat(),
        "month_end": end.isoformat(),
        "spent_usd": _usd(savings.spent_micros),
        "storage_usd": _usd(savings.storage_cost_micros),
        "without_cache_usd": _usd(savings.cost_without_cache_micros),
        "saved_usd": _usd(savings.saved_micros),
        "projected_usd": _usd(projection),
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


def platform_summary(*, page: int = 1, per_page: int = 50) -> dict[str, Any]:
    """The platform overview: a page of tenants with month spend, fleet health and alerts.

    Cross-tenant on purpose (platform principals only); query count is constant in the
    number of tenants and caches: one page of tenants, one grouped spend query for that
    page, one grouped cache count, one fleet series, workers, alerts.
    """
    from billing.models import BudgetAlert, BudgetPeriod, Granularity, UsageRollup

    now = timezone.now()
    start, _ = month_bounds(now)
    page = max(1, page)
    total = Tenant.objects.count()
    tenants = list(Tenant.objects.order_by("slug")[(page - 1) * per_page : page * per_page])
    ids = [t.pk for t in tenants]
    spend = dict(
        UsageRollup.objects.filter(
            tenant_id__in=ids, granularity=Granularity.MINUTE, bucket__gte=start
        )
        .values("tenant_id")
        .annotate(c=Sum("cost_micros"))
        .values_list("tenant_id", "c")
    )
    limits = {
        row["tenant_id"]: row
        for row in BudgetPeriod.objects.filter(
            tenant_id__in=ids, period_start__lte=now, period_end__gt=now
        )
        .values("tenant_id")
        .annotate(limit=Sum("limit_micros"), spent=Sum("spent_micros"))
    }
    live = dict(
        CacheObject.objects.filter(tenant_id__in=ids, state__in=LIVE_STATES)
        .values("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    )
    # all_tenants: platform overview spans tenants (callers hold tenants.list)
    fleet = (
        UsageRollup.objects.all_tenants()
        .filter(granularity=Granularity.MINUTE, bucket__gte=now - timedelta(hours=1))
        .aggregate(
            prompt=Coalesce(Sum("prompt_tokens"), 0), cached=Coalesce(Sum("cached_read_tokens"), 0)
        )
    )
    workers = worker_rows()
    alerts = [
        {
            "tenant": a.tenant.slug,
            "budget": a.budget.name,
            "threshold": a.threshold,
            "at": a.created_at.isoformat(),
        }
        # all_tenants: platform overview spans tenants (callers hold tenants.list)
        for a in BudgetAlert.objects.all_tenants()
        .select_related("tenant", "budget")
        .order_by("-created_at")[:20]
    ]
    return {
        "generated_at": now.isoformat(),
        "tenants_total": total,
        "page": page,
        "per_page": per_page,
        "tenants": [
            {
                "slug": t.slug,
                "name": t.display_name,
                "state": t.state,
                "month_spend_usd": _usd(spend.get(t.pk, 0) or 0),
                "budget_limit_usd": _usd(limits[t.pk]["limit"]) if t.pk in limits else None,
                "live_caches": live.get(t.pk, 0),
            }
            for t in tenants
        ],
        "fleet_hit_rate": round(fleet["cached"] / fleet["prompt"], 4) if fleet["prompt"] else None,
        "top": platform_top(),  # in the snapshot so a live refresh keeps it agreeing
        "hit_series": hit_series(tenant_ids=None),
        "workers": workers,
        "alerts": alerts,
    }


def _ratio(metrics: dict | None, hits: str, queries: str) -> float | None:
    metrics = metrics or {}
    q = metrics.get(queries) or 0
    return round((metrics.get(hits) or 0) / q, 4) if q else None


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
        "ttl_policy": cache.ttl_policy,
        "ttl_seconds": cache.ttl_seconds,
        "expire_at": cache.expire_at.isoformat() if cache.expire_at else None,
        "token_count": cache.token_count,
        "hit_count": cache.hit_count,
        "hit_tokens": cache.hit_tokens,
        "query_rate_per_hour": round(cache.query_rate_ewma, 3),
        "storage_cost_usd": _usd(storage),
        "placement": cache.placement,
        "content_digest": cache.content_digest,
        "timeline": timeline,
        "prewarm_cron": cache.prewarm_cron,
    }


def worker_rows() -> list[dict[str, Any]]:
    """Workers with their last scraped health, KV usage and prefix hit rate."""
    from workers.models import Worker

    return [
        {
            "name": w.name,
            "pool": w.pool,
            "model": w.model,
            "state": w.state,
            "kv_usage": (w.metrics or {}).get("vllm:kv_cache_usage_perc"),
            "running": (w.metrics or {}).get("vllm:num_requests_running"),
            "waiting": (w.metrics or {}).get("vllm:num_requests_waiting"),
            "hit_rate": _ratio(
                w.metrics, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
            ),
            "last_seen_at": w.last_seen_at.isoformat() if w.last_seen_at else None,
            "blocks": w.num_blocks,
            "capacity_tokens": (w.num_blocks or 0) * w.block_size,
        }
        for w in Worker.objects.order_by("pool", "name")[:200]
    ]


def workers_summary() -> dict[str, Any]:
    """The workers page: worker rows plus pinned prefix tokens per worker and tenant.

    Two queries whatever the fleet size: the workers, and one grouped count of live vLLM
    caches unnested over their placement.
    """
    from django.db.models import F, Func

    workers = worker_rows()
    rows = (
        # all_tenants: platform overview spans tenants (callers hold tenants.list)
        CacheObject.objects.all_tenants()
        .filter(provider="vllm", state__in=LIVE_STATES)
        .annotate(worker=Func(F("placement"), function="unnest"))
        .values("worker", "tenant__slug")
        .annotate(tokens=Coalesce(Sum("token_count"), 0), caches=Count("id"))
        .order_by("worker", "-tokens")
    )
    pinned: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        pinned.setdefault(r["worker"], []).append(
            {"tenant": r["tenant__slug"], "tokens": r["tokens"], "caches": r["caches"]}
        )
    for w in workers:
        w["pinned"] = pinned.get(w["name"], [])
    return {"generated_at": timezone.now().isoformat(), "workers": workers}


# --- Charts and rankings ------------------------------------------------------------------

# range -> (span, bucket size in seconds); buckets come from the per-minute rollups,
# truncated in the database, and empty buckets are filled so the time axis shows gaps.
RANGES: dict[str, tuple[timedelta, int]] = {
    "1h": (timedelta(hours=1), 60),
    "24h": (timedelta(hours=24), 900),
    "7d": (timedelta(days=7), 3600),
}


def usage_series(*, tenant_ids: list[Any] | None, range_key: str) -> dict[str, Any]:
    """Hit rate, requests, spend and savings per bucket over ``range_key`` (one query).

    ``tenant_ids=None`` is the whole fleet (platform pages only). Unknown ranges fall back
    to 1 h. Every bucket of the range is present; a bucket without traffic has a null
    hit rate (no data, not 0 %).
    """
    from django.db.models import DateTimeField, F, Func, IntegerField, Value
    from django.db.models.functions import Cast

    from billing.models import Granularity, UsageRollup

    span, step = RANGES.get(range_key, RANGES["1h"])
    now = timezone.now()
    start_epoch = int((now - span).timestamp()) // step * step
    # all_tenants: a platform chart spans every tenant unless tenant_ids narrows it
    rollups = UsageRollup.objects.all_tenants().filter(
        granularity=Granularity.MINUTE,
        bucket__gte=datetime.fromtimestamp(start_epoch, tz=now.tzinfo),
    )
    if tenant_ids is not None:
        rollups = rollups.filter(tenant_id__in=tenant_ids)
    epoch = Cast(Func(Value("epoch"), F("bucket"), function="date_part"), IntegerField())
    slot = Func((epoch / step) * step, function="to_timestamp", output_field=DateTimeField())
    rows = {
        int(r["slot"].timestamp()): r
        for r in rollups.annotate(slot=slot)
        .values("slot")
        .annotate(
            prompt=Sum("prompt_tokens"),
            cached=Sum("cached_read_tokens"),
            cost=Sum("cost_micros"),
            without=Sum("cost_without_cache_micros"),
            requests=Sum("requests"),
        )
        .order_by("slot")
    }
    points = []
    for t in range(start_epoch, int(now.timestamp()) + 1, step):
        r = rows.get(t)
        prompt = r["prompt"] if r else 0
        points.append(
            {
                "at": datetime.fromtimestamp(t, tz=now.tzinfo).isoformat(),
                "requests": r["requests"] if r else 0,
                "hit_rate": round(r["cached"] / prompt, 4) if r and prompt else None,
                "cost_usd": _usd(r["cost"]) if r else 0.0,
                "saved_usd": _usd(max(0, r["without"] - r["cost"])) if r else 0.0,
            }
        )
    return {
        "range": range_key if range_key in RANGES else "1h",
        "step_seconds": step,
        "points": points,
    }


def platform_top(*, limit: int = 5) -> dict[str, list[dict[str, Any]]]:
    """Top tenants this month by spend and by savings (cross-tenant: platform pages only)."""
    from billing.models import Granularity, UsageRollup

    start, _ = month_bounds(timezone.now())
    rows = list(
        # all_tenants: the platform overview ranks every tenant (platform pages only)
        UsageRollup.objects.all_tenants()
        .filter(granularity=Granularity.MINUTE, bucket__gte=start)
        .values("tenant__slug", "tenant__display_name")
        .annotate(cost=Sum("cost_micros"), without=Sum("cost_without_cache_micros"))
    )
    ranked = [
        {
            "slug": r["tenant__slug"],
            "name": r["tenant__display_name"],
            "spend_usd": _usd(r["cost"]),
            "saved_usd": _usd(max(0, r["without"] - r["cost"])),
        }
        for r in rows
    ]
    return {
        "by_spend": sorted(ranked, key=lambda r: -r["spend_usd"])[:limit],
        "by_savings": sorted(ranked, key=lambda r: -r["saved_usd"])[:limit],
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
    ids = set(usage) | set(storage)
    names = dict(
        CacheObject.objects.filter(
            tenant=tenant, pk__in=[i for i in ids if _is_uuid(i)]
        ).values_list("pk", "name")
    )
    ranked = []
    for cid in ids:
        u = usage.get(cid) or {"cost": 0, "without": 0}
        ranked.append(
            {
                "id": cid,
                "name": names.get(_as_uuid(cid), cid),
                "spend_usd": _usd((u["cost"] or 0) + (storage.get(cid) or 0)),
                "saved_usd": _usd(max(0, (u["without"] or 0) - (u["cost"] or 0))),
            }
        )
    return {
        "by_spend": sorted(ranked, key=lambda r: -r["spend_usd"])[:limit],
        "by_savings": sorted(ranked, key=lambda r: -r["saved_usd"])[:limit],
    }


def _is_uuid(value: str) -> bool:
    return _as_uuid(value) is not None


def _as_uuid(value: str):
    import uuid

    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def breakeven_models() -> list[dict[str, Any]]:
    """Models the calculator offers, each ``provider:model`` with whether it has a price.

    Vertex models from the catalog, vLLM models from the registered workers; a vLLM model
    is priced through its pool's GPU-hour price, so its key carries the vllm provider.
    """
    from billing.models import ModelPrice, PoolPrice
    from caches.catalog import VERTEX_MODELS, vllm_models

    priced = set(ModelPrice.objects.values_list("provider", "model").distinct())
    pools = PoolPrice.objects.exists()
    models = [
        {"key": f"vertex:{m}", "provider": "vertex", "model": m, "priced": ("vertex", m) in priced}
        for m in sorted(VERTEX_MODELS)
    ]
    models += [
        {
            "key": f"vllm:{m}",
            "provider": "vllm",
            "model": m,
            "priced": pools or ("vllm", m) in priced,
        }
        for m in sorted(vllm_models())
    ]
    return models
