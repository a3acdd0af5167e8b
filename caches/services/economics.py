"""Whether an economic-TTL cache should be extended (delegates to billing's policy).

Until the billing price book is wired in, the decision uses the observed query rate:
extend while the cache was used at least once in its last TTL window and its EWMA query
rate is above zero.
"""

from __future__ import annotations

from datetime import datetime

from caches.models import CacheObject


def cache_economic_extension(*, cache: CacheObject, now: datetime) -> bool:
    """True when keeping the cache for another TTL is expected to save money."""
    try:
        from billing.services.cache_economics import cache_should_extend  # type: ignore
    except ImportError:
        recently_used = cache.last_hit_at is not None and (
            (now - cache.last_hit_at).total_seconds() < cache.ttl_seconds
        )
        return recently_used and cache.query_rate_ewma > 0
    return cache_should_extend(cache=cache, now=now)
