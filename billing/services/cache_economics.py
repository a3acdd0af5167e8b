"""The economic TTL policy applied to a cache object (called by the caches app).

The app's one economic policy is the autopilot, ``billing.ttl_policy.autopilot_decide``
(the function ``bench/ttl_policy.py`` measures), asked at three points: creation
(``cache_autopilot_creation_ttl``: the TTL the cache is created with, through
``ttl_policy.autopilot_creation_decide``), the hit flush
(``cache_autopilot_on_hits``) and the scheduler's reviews (``cache_autopilot_decision``).
The cache is read duck-typed (``tenant_id``, ``provider``, ``model``, ``token_count``,
``content_digest``, ``expire_at`` and optionally ``pool``) so billing does not import the
caches app.
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from billing import ttl_policy
from billing.models import BudgetPeriod, Provider
from billing.pricing import MICROS_PER_USD
from billing.selectors.prices import (
    model_price_resolve,
    pool_price_resolve,
    pool_rates,
    token_rates,
)

logger = logging.getLogger(__name__)


def tenant_budget_used_fraction(*, tenant_id: UUID | str, at: datetime) -> Decimal:
    """The highest (spent + reserved) / limit over the tenant's current budget periods."""
    used = Decimal(0)
    for spent, reserved, limit in BudgetPeriod.objects.filter(
        tenant_id=tenant_id,
        period_start__lte=at,
        period_end__gt=at,
        budget__archived_at__isnull=True,
    ).values_list("spent_micros", "reserved_micros", "limit_micros"):
        if limit > 0:
            used = max(used, Decimal(spent + reserved) / Decimal(limit))
    return used


def cache_economics_for(*, cache: Any, at: datetime) -> ttl_policy.CacheEconomics | None:
    """The per-1M-token miss, hit and storage prices of a cache, or None if unpriced."""
    tokens = getattr(cache, "token_count", None)
    if not tokens:
        return None
    if cache.provider == Provider.VLLM:
        pool = getattr(cache, "pool", "") or ""
        gpu_price = pool_price_resolve(pool=pool, at=at) if pool else None
        if gpu_price is None:
            return None
        gpu = pool_rates(gpu_price)
        prefill = Decimal(gpu.prefill_micros(1_000_000)) / MICROS_PER_USD
        storage = Decimal(gpu.blocks_for(1_000_000)) * gpu.gpu_hour_usd / gpu.kv_blocks_per_gpu
        return ttl_policy.CacheEconomics(int(tokens), prefill, Decimal(0), storage)
    price = model_price_resolve(provider=cache.provider, model=cache.model, at=at)
    if price is None:
        return None
    rates = token_rates(price).for_prompt(int(tokens))
    return ttl_policy.CacheEconomics(
        int(tokens), rates.input, rates.cached_input, rates.storage_per_hour
    )


# --- The autopilot in the app -----------------------------------------------------------


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def _profile_key(cache: Any) -> dict[str, Any]:
    return {
        "tenant_id": cache.tenant_id,
        "provider": cache.provider,
        "model": cache.model,
        "content_digest": cache.content_digest,
    }


def ttl_profile_observe(*, cache: Any, at: datetime, queries: int = 1) -> ttl_policy.ReuseHistory:
    """Learn ``queries`` uses of the cache's content at ``at``; returns the new history.

    The profile row is locked (``SELECT ... FOR UPDATE``) so concurrent hit flushes
    append their gaps in turn. Keyed by content: a re-created cache keeps what was learned.
    """
    from django.db import transaction

    from billing.models import TtlProfile

    with transaction.atomic():
        TtlProfile.objects.get_or_create(**_profile_key(cache))
        profile = TtlProfile.objects.select_for_update().get(**_profile_key(cache))
        history = _history(profile)
        for _ in range(max(int(queries), 0)):
            history = history.observe(_epoch(at))
        profile.gaps_seconds = list(history.gaps)
        profile.last_query_at = at if history.last_query_at is not None else None
        profile.queries += max(int(queries), 0)
        profile.save(update_fields=["gaps_seconds", "last_query_at", "queries", "updated_at"])
    return history


def _history(profile: Any) -> ttl_policy.ReuseHistory:
    last = profile.last_query_at
    return ttl_policy.ReuseHistory(
        tuple(profile.gaps_seconds or ()), _epoch(last) if last is not None else None
    )


def ttl_profile_history(*, cache: Any) -> ttl_policy.ReuseHistory:
    """What the autopilot knows about the cache's content (empty when nothing yet)."""
    from billing.models import TtlProfile

    profile = TtlProfile.objects.filter(**_profile_key(cache)).first()
    return _history(profile) if profile is not None else ttl_policy.ReuseHistory()


def cache_autopilot_decision(
    *, cache: Any, now: datetime, creating: bool = False
) -> ttl_policy.AutopilotDecision | None:
    """``billing.ttl_policy.autopilot_decide`` for one cache now (None when unpriced).

    ``creating``: the cache does not exist yet (the decision may refuse it near a budget).
    """
    economics = cache_economics_for(cache=cache, at=now)
    if economics is None:
        return None
    history = ttl_profile_history(cache=cache)
    used = tenant_budget_used_fraction(tenant_id=cache.tenant_id, at=now)
    if creating or cache.expire_at is None:
        return ttl_policy.autopilot_creation_decide(
            history=history, economics=economics, now=_epoch(now), budget_used_fraction=used
        )
    return ttl_policy.autopilot_decide(
        history=history,
        economics=economics,
        now=_epoch(now),
        expire_at=_epoch(cache.expire_at),
        budget_used_fraction=used,
    )


def cache_autopilot_creation_ttl(
    *, cache: Any, now: datetime, token_estimate: int, pool: str = ""
) -> ttl_policy.AutopilotDecision | None:
    """The autopilot's answer for a cache about to be created (None when unpriced).

    The decision's ``ttl_from(now)`` is the TTL to create it with: the keep-alive learned
    for the content (a content seen before keeps its history), at least the minimum TTL,
    never the TTL the cache was requested with. ``token_estimate`` prices it before the
    provider has counted it; ``pool`` prices a vLLM cache not yet placed. ``action``
    ``refuse``: near a budget, no new pins.
    """
    from types import SimpleNamespace

    priced = SimpleNamespace(
        tenant_id=cache.tenant_id,
        provider=cache.provider,
        model=cache.model,
        token_count=int(cache.token_count or token_estimate),
        content_digest=cache.content_digest,
        pool=pool or getattr(cache, "pool", "") or "",
        expire_at=None,
    )
    return cache_autopilot_decision(cache=priced, now=now, creating=True)


def cache_autopilot_on_hits(*, cache: Any, now: datetime, hits: int) -> bool:
    """Learn a flush's hits and ask for a review now when the expiry should move.

    Called by the hit flush for economic caches (the cache row locked by the caller).
    Returns True when ``next_refresh_at`` was set to now, so the scheduler's next run
    extends (or shortens) the cache to ``last query + keep-alive``.
    """
    ttl_profile_observe(cache=cache, at=now, queries=hits)
    decision = cache_autopilot_decision(cache=cache, now=now)
    if decision is None or decision.action not in (ttl_policy.EXTEND, ttl_policy.SHORTEN):
        return False
    cache.next_refresh_at = now
    cache.save(update_fields=["next_refresh_at", "updated_at"])
    return True
