"""vLLM caches through Celery against real vLLM, and KV pressure from resident blocks.

A real ``celery -A controlplane worker`` runs the create (warm-up), refresh (probe) and
eviction of a cache pinned on a session vLLM server (shared with the other tests in this
folder: vLLM starts once). The warm-up really caches the prefix (vLLM's own
``cached_tokens``), the probe measures it resident, both are booked at the worker's pool,
and the eviction ends the cache. Then: an idle real vLLM's ``kv_cache_usage_perc`` reads
0 while its cached blocks fill the pool, so the pressure the gateway throttles on comes
from the resident blocks the KV index holds (issue 22.6).
"""

from __future__ import annotations

import httpx
import pytest

from billing.models import UsageRecord
from caches.content import CacheContent
from caches.models import CacheObject, CacheState
from caches.services import lifecycle
from tenants.actor import Actor
from tenants.salt import tenant_cache_salt
from tests.caches.processes import start_celery_worker, stop_process, wait_for, wait_ready
from tests.factories import actor_for
from tests.workers.real_vllm.support import long_text
from workers.kv_pressure import PRESSURE, RESIDENT
from workers.models import Worker
from workers.services import worker_probe, worker_register

pytestmark = [pytest.mark.real_vllm, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _register(server, tiny_model, pool: str = "cpu-a") -> Worker:
    worker_register(
        actor=Actor.cli(),
        name=server.name,
        base_url=server.base_url,
        model="tiny",
        pool=pool,
        engine="vllm",
        kv_events_endpoint=server.events_endpoint,
        hash_seed=server.hash_seed or "",
        tokenizer=str(tiny_model),
    )
    return worker_probe(worker=Worker.objects.get(name=server.name))


def _cache(pk) -> CacheObject:
    return CacheObject.objects.all_tenants().get(pk=pk)


def test_create_refresh_and_evict_run_through_celery_on_real_vllm(
    vllm_pair, tiny_model, tenant_a, admin_a, redis_flush, tmp_path
) -> None:
    from billing.services.usage import usage_flush

    server = vllm_pair[0]
    assert _register(server, tiny_model).state == "healthy"
    celery = start_celery_worker(
        log_dir=tmp_path, name="vllm", vertex_base_url="http://127.0.0.1:9"
    )
    try:
        wait_ready(celery, tmp_path / "vllm.log")
        content = {"system_instruction": long_text(9090, words=500)}
        outcome = lifecycle.cache_create(
            tenant=tenant_a,
            actor=actor_for(admin_a),
            spec=lifecycle.CacheSpec(
                name="handbook", provider="vllm", model="tiny", content=content, ttl_seconds=900
            ),
        )
        pk = outcome.operation.cache_id
        wait_for(lambda: _cache(pk).state == CacheState.ACTIVE, 120, "the warm-up")
        cache = _cache(pk)
        assert cache.placement == [server.name] and cache.pool == "cpu-a"
        assert cache.token_count and cache.token_count > 256
        # vLLM itself holds the prefix under the tenant's salt.
        prefix = CacheContent.from_dict(content).render_prefix()
        reply = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={
                "model": "tiny",
                "messages": [{"role": "system", "content": prefix}],
                "max_tokens": 1,
                "cache_salt": tenant_cache_salt(tenant_a),
            },
            timeout=120,
        ).json()
        full = (cache.token_count - 1) // 128 * 128
        assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == full
        lifecycle.cache_extend_ttl(cache=cache, actor=actor_for(admin_a), ttl_seconds=1200)
        wait_for(lambda: _cache(pk).resident_checked_at is not None, 120, "the probe")
        cache = _cache(pk)
        assert (cache.resident_tokens, cache.evicted_seen_at) == (full, None)
        lifecycle.cache_evict(cache=cache, actor=actor_for(admin_a))
        wait_for(lambda: _cache(pk).state == CacheState.EVICTED, 120, "the eviction")
    finally:
        stop_process(celery)
    usage_flush()
    rows = UsageRecord.objects.filter(tenant=tenant_a, cache_id=str(pk))
    booked = {r.request_id.split(":")[0]: r for r in rows}
    assert set(booked) == {"cache-warm", "cache-probe"}
    assert booked["cache-warm"].prompt_tokens == cache.token_count  # computed in full
    assert 0 < booked["cache-probe"].prompt_tokens < 128  # only the unaligned tail
    assert all(r.kind == "cache_create" and r.pool == "cpu-a" for r in rows)


def test_pressure_counts_the_cached_blocks_an_idle_real_vllm_reports_as_free(
    vllm_pair, tiny_model, redis_flush
) -> None:
    import redis as redis_lib
    from django.conf import settings

    from workers import kv_index
    from workers.kv_indexer import IndexerThread, registry_sources

    server = vllm_pair[1]
    worker = _register(server, tiny_model)
    client = redis_lib.Redis.from_url(settings.REDIS_URL)
    indexer = IndexerThread(redis=client, sources=registry_sources).start()
    try:
        for n in range(3):
            httpx.post(
                f"{server.base_url}/v1/completions",
                json={"model": "tiny", "prompt": long_text(5150 + n, 600), "max_tokens": 1},
                timeout=120,
            ).raise_for_status()
        status = lambda: kv_index.worker_event_status(client, workers=[server.name])[server.name]  # noqa: E731
        wait_for(lambda: status()["resident_blocks"] >= 6, 60, "the blocks in the index")
        worker = worker_probe(worker=worker)
    finally:
        indexer.stop()
    metrics = worker.metrics
    assert metrics["vllm:kv_cache_usage_perc"] == 0.0  # vLLM: idle, nothing "used"
    resident = status()["resident_blocks"] / (worker.num_blocks - 1)
    assert metrics[RESIDENT] == pytest.approx(resident, abs=1e-4)  # stored rounded
    assert metrics[RESIDENT] > 0 and metrics[PRESSURE] == pytest.approx(resident)
