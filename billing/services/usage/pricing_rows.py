"""Pricing one queued usage message at its time (the flush's in-memory step)."""

from __future__ import annotations

from datetime import datetime

from billing.models import Provider, UsageKind
from billing.pricing import Cost, cache_creation_cost, gpu_cost, token_cost
from billing.selectors.prices import PriceIndex
from billing.services.usage.queue import _Message


def price_row(
    index: PriceIndex, m: _Message, at: datetime
) -> tuple[int | None, int | None, Cost | None]:
    """(model price id, pool price id, cost) of one message, or Nones when unpriced."""
    counts = m.counts()
    if m.provider == Provider.VLLM:
        pool_price = index.pool_price(m.pool, at)
        if pool_price is None:
            return None, None, None
        if m.estimate_nanos is not None:
            estimate = Cost(m.estimate_nanos, m.estimate_nanos, {"estimate": m.estimate_nanos})
            return None, pool_price.pk, estimate
        return None, pool_price.pk, gpu_cost(counts, index.pool_rates(pool_price))
    price = index.model_price(m.provider, m.model, at)
    if price is None:
        return None, None, None
    rates = index.rates(price)
    if m.estimate_nanos is not None:  # the reservation, booked as an estimate
        return (
            price.pk,
            None,
            Cost(m.estimate_nanos, m.estimate_nanos, {"estimate": m.estimate_nanos}),
        )
    if m.kind == UsageKind.CACHE_CREATE:
        cost = cache_creation_cost(
            tokens=m.prompt_tokens, rates=rates, ttl_seconds=m.ttl_seconds or 3600
        )
        return price.pk, None, cost
    return price.pk, None, token_cost(counts, rates, at)
