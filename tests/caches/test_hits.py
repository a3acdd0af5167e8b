"""The cache-hit flush: no counts lost when the database refuses a batch, none counted twice."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from caches.models import CacheObject, CacheState
from caches.services.hits import CACHE_HITS_KEY, cache_hits_flush


def _cache(tenant) -> CacheObject:
    now = timezone.now()
    return CacheObject.objects.create(
        tenant=tenant,
        name=f"c-{uuid.uuid4().hex[:8]}",
        provider="vertex",
        model="gemini-2.5-flash",
        content={"system": "x"},
        content_digest=uuid.uuid4().hex,
        token_count=10_000,
        ttl_seconds=3_600,
        expire_at=now + timedelta(hours=1),
        state=CacheState.ACTIVE,
        activated_at=now,
    )


def _flush_keys(client) -> list[bytes]:
    return list(client.scan_iter(match=f"{CACHE_HITS_KEY}:flush:*"))


def test_nothing_to_flush_is_zero_and_leaves_no_batch(db, redis_flush) -> None:
    assert cache_hits_flush() == 0
    assert _flush_keys(redis_flush) == []


@pytest.mark.django_db(transaction=True)
def test_a_refused_batch_goes_back_to_redis_and_the_next_flush_applies_it_once(
    tenant_a, redis_flush
) -> None:
    cache = _cache(tenant_a)
    redis_flush.hincrby(CACHE_HITS_KEY, f"{cache.pk}:count", 3)
    redis_flush.hincrby(CACHE_HITS_KEY, f"{cache.pk}:tokens", 3_000)
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                CacheObject.objects.all_tenants().select_for_update().get(pk=cache.pk)
                locked.set()
                release.wait(timeout=60)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert locked.wait(timeout=30)
        with pytest.raises(OperationalError, match="lock"):
            cache_hits_flush(lock_timeout_ms=50)
        # Hits that arrive while the row is held add to the restored batch.
        redis_flush.hincrby(CACHE_HITS_KEY, f"{cache.pk}:count", 1)
    finally:
        release.set()
        holder.join(timeout=30)
    assert _flush_keys(redis_flush) == []
    assert redis_flush.hget(CACHE_HITS_KEY, f"{cache.pk}:count") == b"4"

    assert cache_hits_flush() == 1
    cache.refresh_from_db()
    assert (cache.hit_count, cache.hit_tokens) == (4, 3_000)
    assert cache_hits_flush() == 0  # applied once
    cache.refresh_from_db()
    assert cache.hit_count == 4


def test_a_malformed_field_is_dropped_and_the_rest_applied(tenant_a, redis_flush, caplog) -> None:
    cache = _cache(tenant_a)
    redis_flush.hincrby(CACHE_HITS_KEY, f"{cache.pk}:count", 2)
    redis_flush.hincrby(CACHE_HITS_KEY, "not-a-cache-id:count", 5)
    redis_flush.hset(CACHE_HITS_KEY, f"{cache.pk}:tokens", "many")
    assert cache_hits_flush() == 1
    cache.refresh_from_db()
    assert (cache.hit_count, cache.hit_tokens) == (2, 0)
    assert redis_flush.exists(CACHE_HITS_KEY) == 0
    assert _flush_keys(redis_flush) == []
    assert sum("malformed cache-hit field" in r.message for r in caplog.records) == 2
