"""What a cache's creation costs and how long it is created for.

``creation_book`` books the write of the cached tokens (one ledger row per operation,
superseded creates included: Google bills a cache that was made). For economic caches,
``economic_creation_decision`` asks the TTL autopilot (``billing.ttl_policy.autopilot_decide``,
the one economic rule, the function ``bench/ttl_policy.py`` measures) how long to create
the cache for, from what was learned about its content.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from billing import ttl_policy
from caches.models import CacheObject, CacheOperation, Provider, TtlPolicy


def creation_book(
    op: CacheOperation, cache: CacheObject, now: datetime, *, observe: bool = True
) -> None:
    """Book the write of the cached tokens (billing; one ledger row per operation) and,
    for economic caches, count the creation as a use of the content (the autopilot)."""
    from billing.services.usage import cache_creation_record

    if observe and cache.ttl_policy == TtlPolicy.ECONOMIC:
        from billing.services.cache_economics import ttl_profile_observe

        ttl_profile_observe(cache=cache, at=now)

    transaction.on_commit(
        lambda: cache_creation_record(
            tenant=cache.tenant,
            cache_id=str(cache.pk),
            operation_id=str(op.pk),
            provider=cache.provider,
            model=cache.model,
            tokens=int(cache.token_count or 0),
            ttl_seconds=int(cache.ttl_seconds),
            occurred_at=now,
            principal_id=str(op.requested_by_id) if op.requested_by_id else None,
        )
    )


def economic_creation_decision(
    *, cache: CacheObject, now: datetime
) -> ttl_policy.AutopilotDecision | None:
    """The autopilot's answer for creating ``cache`` now (None when it cannot be priced:
    the requested TTL then stands). Its ``ttl_from(now)`` is the TTL to create with;
    ``refuse``: near a budget, no new caches."""
    from billing.services.cache_economics import cache_autopilot_creation_ttl
    from caches import catalog
    from caches.content import CacheContent

    estimate = catalog.creation_token_estimate(
        cache.provider, CacheContent.from_dict(cache.content)
    )
    pool = cache.pool
    if cache.provider == Provider.VLLM and not pool:
        from caches.providers.vllm import placement_pool

        pool = placement_pool(cache)  # priced at the pool its warm-up will land on
    return cache_autopilot_creation_ttl(cache=cache, now=now, token_estimate=estimate, pool=pool)
