"""Folding gateway cache hits into cache rows, in batches.

The gateway increments a Redis hash per request (no SQL on the hot path); this service,
run by a beat task, swaps the hash out atomically (RENAME) and applies the counts:
hit totals, last hit time, and the query-rate EWMA the economic TTL policy reads.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import cast

from django.db import transaction
from django.utils import timezone

from billing.services.cache_economics import cache_autopilot_on_hits
from billing.ttl_policy import ewma_update
from caches.models import CacheObject, TtlPolicy
from controlplane.ops import redis_client

CACHE_HITS_KEY = "cacheplane:cache-hits"


def cache_hits_flush() -> int:
    """Apply pending hit counts; returns how many caches were updated."""
    client = redis_client()
    batch_key = f"{CACHE_HITS_KEY}:flush:{uuid.uuid4().hex}"
    try:
        client.rename(CACHE_HITS_KEY, batch_key)
    except Exception as exc:
        if "no such key" in str(exc).lower():
            return 0
        raise
    # The client does not decode responses (the default): fields and values are bytes.
    raw = cast("dict[bytes, bytes]", client.hgetall(batch_key))
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"count": 0, "tokens": 0})
    for field, value in raw.items():
        cache_id, _, kind = field.decode().rpartition(":")
        counts[cache_id][kind] += int(value)
    now = timezone.now()
    updated = 0
    with transaction.atomic():
        # Several cache rows: locked in primary-key order (caches.services.locks).
        caches = (
            # all_tenants: hit counts arrive keyed by cache id, for every tenant
            CacheObject.objects.all_tenants()
            .select_for_update(no_key=True)
            .filter(pk__in=list(counts))
            .order_by("pk")
        )
        for cache in caches:
            hits = counts[str(cache.pk)]
            cache.query_rate_ewma = ewma_update(
                rate_per_hour=cache.query_rate_ewma,
                last_at=cache.last_hit_at,
                now=now,
                hits=hits["count"],
            )
            cache.hit_count += hits["count"]
            cache.hit_tokens += hits["tokens"]
            cache.last_hit_at = now
            cache.save(
                update_fields=[
                    "hit_count",
                    "hit_tokens",
                    "last_hit_at",
                    "query_rate_ewma",
                    "updated_at",
                ]
            )
            updated += 1
            if cache.ttl_policy == TtlPolicy.ECONOMIC:
                cache_autopilot_on_hits(cache=cache, now=now, hits=hits["count"])
    client.delete(batch_key)
    return updated
