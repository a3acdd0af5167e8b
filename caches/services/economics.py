"""Whether an economic-TTL cache should be extended: billing's policy on this cache."""

from __future__ import annotations

from datetime import datetime

from billing.services.cache_economics import cache_should_extend
from caches.models import CacheObject


def cache_economic_extension(*, cache: CacheObject, now: datetime) -> bool:
    """True when keeping the cache for another TTL is expected to save more than it costs."""
    return cache_should_extend(cache=cache, now=now)
