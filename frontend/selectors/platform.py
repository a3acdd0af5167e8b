"""Read models for the platform pages: the tenants overview, rankings, the worker fleet.

Cross-tenant on purpose: only platform principals reach these pages (they hold
``tenants.list``), and each function's query count is constant in the fleet's size.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Count, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from caches.models import LIVE_STATES, CacheObject
from frontend.selectors.common import month_bounds, usd
from frontend.selectors.series import hit_series
from tenants.models import Tenant


def platform_summary(*, page: int = 1, per_page: int = 50) -> dict[str, Any]:
    """The platform overview: a page of tenants with month spend, fleet health and alerts.

    Cross-tenant on purpose (platform principals only); query count is constant in the
    number of tenants and caches: one page of tenants, one grouped spend query for that
    page, one grouped cache count, one fleet series, workers, alerts.
    """
    from billing.models import BudgetAlert, BudgetPeriod, Granularity, UsageRollup

    now = timezone.now()
    start, _ = month_bounds(now)
    total = Tenant.objects.count()
    # Past the last page is the last page (an OFFSET beyond bigint was a 500).
    page = min(max(1, page), max(1, -(-total // per_page)))
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
                "month_spend_usd": usd(spend.get(t.pk, 0) or 0),
                "budget_limit_usd": usd(limits[t.pk]["limit"]) if t.pk in limits else None,
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


def _ratio(metrics: dict[str, Any] | None, hits: str, queries: str) -> float | None:
    metrics = metrics or {}
    q = metrics.get(queries) or 0
    return round((metrics.get(hits) or 0) / q, 4) if q else None


def _events_text(worker: Any, status: dict[str, Any] | None) -> tuple[str, bool]:
    """What the console says about a worker's KV events, and whether that is a problem."""
    if not worker.kv_events_endpoint:
        return "not configured", False
    if status is None:
        return "unknown (Redis unreachable)", True
    if status["hash_bad"]:
        return (
            f"hashes do not match ({status['hash_bad']} of "
            f"{status['hash_bad'] + status['hash_ok']} checked): routed approximately",
            True,
        )
    if not status["live"]:
        age = status["age_seconds"]
        return ("not arriving" + (f" (last {age:.0f} s ago)" if age is not None else "")), True
    return f"live, {status['resident_blocks']} blocks indexed", False


def worker_rows() -> list[dict[str, Any]]:
    """Workers with their last scraped health, KV usage and prefix hit rate, how the gateway
    routes them (exact, or approximate and why) and whether their KV events arrive."""
    from workers.hash_config import REASONS, worker_hash_spec
    from workers.models import Worker

    workers = list(Worker.objects.order_by("pool", "name")[:200])
    try:
        from controlplane.ops import redis_client
        from workers.kv_index import worker_event_status

        events = worker_event_status(redis_client(), workers=[w.name for w in workers])
    except Exception:  # the page still renders without Redis; the column says so
        events = {}
    rows = []
    for w in workers:
        spec, reason = worker_hash_spec(w)
        text, problem = _events_text(w, events.get(w.name))
        routing = "exact" if spec else f"approximate: {REASONS.get(reason, reason)}"
        if spec and problem and w.kv_events_endpoint:
            routing = "approximate: KV events " + text.split(":")[0]
        rows.append(_worker_row(w, routing=routing, events=text, events_problem=problem))
    return rows


def _worker_row(w: Any, **extra: Any) -> dict[str, Any]:
    from workers.kv_pressure import RESIDENT, kv_pressure_of

    return {
        **extra,
        **{
            "id": str(w.pk),
            "name": w.name,
            "pool": w.pool,
            "model": w.model,
            "engine": w.engine,
            "engine_version": w.engine_version,
            "state": w.state,
            "kv_usage": kv_pressure_of(w.metrics or {}),
            "kv_running": (w.metrics or {}).get("vllm:kv_cache_usage_perc"),
            "kv_resident": (w.metrics or {}).get(RESIDENT),
            "running": (w.metrics or {}).get("vllm:num_requests_running"),
            "waiting": (w.metrics or {}).get("vllm:num_requests_waiting"),
            "hit_rate": _ratio(
                w.metrics, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
            ),
            "last_seen_at": w.last_seen_at.isoformat() if w.last_seen_at else None,
            "blocks": w.num_blocks,
            "capacity_tokens": (w.num_blocks or 0) * w.block_size,
        },
    }


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
    ranked: list[dict[str, Any]] = [
        {
            "slug": r["tenant__slug"],
            "name": r["tenant__display_name"],
            "spend_usd": usd(r["cost"]),
            "saved_usd": usd(max(0, r["without"] - r["cost"])),
        }
        for r in rows
    ]
    return {
        "by_spend": sorted(ranked, key=lambda r: -r["spend_usd"])[:limit],
        "by_savings": sorted(ranked, key=lambda r: -r["saved_usd"])[:limit],
    }


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
