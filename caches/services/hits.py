"""Folding gateway cache hits into cache rows, in batches.

The gateway increments a Redis hash per request (no SQL on the hot path); this service,
run by a beat task, swaps the hash out atomically (RENAME) and applies the counts:
hit totals, last hit time, and the query-rate EWMA the economic TTL policy reads.

A batch that cannot be applied (the database refuses, a row lock is not granted within
``lock_timeout_ms``) is added back to the live hash before the error propagates, so the
next run applies it; counts that arrived meanwhile are kept. Only a process killed
between the swap and the commit loses its batch (it stays under ``...:flush:<id>``).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from typing import Any, cast

from django.db import connection, transaction
from django.utils import timezone
from redis import Redis

from billing.services.cache_economics import cache_autopilot_on_hits
from billing.ttl_policy import ewma_update
from caches.models import CacheObject, TtlPolicy
from controlplane.ops import redis_client
from controlplane.redis import keys

logger = logging.getLogger(__name__)

CACHE_HITS_KEY = keys.cache_hits()
#: How long the flush waits for a cache row another transaction holds before giving up
#: (and putting the batch back for the next run) instead of queueing behind it.
LOCK_TIMEOUT_MS = 5_000
_KINDS = frozenset({"count", "tokens"})


def cache_hits_queue(pipe: Any, *, cache_id: str, cached_tokens: int) -> None:
    """Count one hit of ``cache_id`` on a caller's pipeline (the gateway's closing round
    trip); the beat's flush folds it into the cache row."""
    count, tokens = keys.cache_hit_fields(cache_id)
    pipe.hincrby(CACHE_HITS_KEY, count, 1)
    pipe.hincrby(CACHE_HITS_KEY, tokens, cached_tokens)


def _batch_claim(client: Redis, batch_key: str) -> bool:
    """Move the live hash to ``batch_key``; False when there is nothing to flush.

    EXISTS and RENAME in one MULTI, so "no hits" is read from Redis's answer rather than
    from the text of RENAME's error, and any other error still raises.
    """
    with client.pipeline(transaction=True) as pipe:
        pipe.exists(CACHE_HITS_KEY)
        pipe.rename(CACHE_HITS_KEY, batch_key)
        existed, renamed = pipe.execute(raise_on_error=False)
    if not existed:
        return False
    if isinstance(renamed, Exception):
        raise renamed
    return True


def _batch_restore(client: Redis, batch_key: str, raw: dict[bytes, bytes]) -> None:
    """Add an unapplied batch back to the live hash and drop the batch, atomically."""
    with client.pipeline(transaction=True) as pipe:
        for field, value in raw.items():
            pipe.hincrby(CACHE_HITS_KEY, field.decode(), int(value))
        pipe.delete(batch_key)
        pipe.execute()


def _batch_counts(raw: dict[bytes, bytes]) -> dict[str, dict[str, int]]:
    """``{cache id: {"count", "tokens"}}``; a malformed field is logged and dropped (it
    would otherwise fail every flush after it)."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"count": 0, "tokens": 0})
    for field, value in raw.items():
        cache_id, _, kind = field.decode(errors="replace").rpartition(":")
        try:
            uuid.UUID(cache_id)
            amount = int(value)
        except ValueError:
            kind = ""
        if kind not in _KINDS:
            logger.warning("dropping malformed cache-hit field", extra={"field": repr(field)})
            continue
        counts[cache_id][kind] += amount
    return counts


def cache_hits_flush(*, lock_timeout_ms: int = LOCK_TIMEOUT_MS) -> int:
    """Apply pending hit counts; returns how many caches were updated.

    Raises the database's error when the batch cannot be applied, after putting the
    batch back in Redis for the next run.
    """
    client = redis_client()
    batch_key = keys.cache_hits_batch(uuid.uuid4().hex)
    if not _batch_claim(client, batch_key):
        return 0
    # The client does not decode responses (the default): fields and values are bytes.
    raw = cast("dict[bytes, bytes]", client.hgetall(batch_key))
    try:
        updated = _batch_apply(_batch_counts(raw), lock_timeout_ms=lock_timeout_ms)
    except Exception:
        _batch_restore(client, batch_key, raw)
        raise
    client.delete(batch_key)
    return updated


def _batch_apply(counts: dict[str, dict[str, int]], *, lock_timeout_ms: int) -> int:
    now = timezone.now()
    updated = 0
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{lock_timeout_ms}ms"])
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
    return updated
