"""Honest vLLM cache semantics (issue 22.5), on reference workers: a fixed TTL expires
although pins keep the blocks resident; storage is priced at the holding worker's pool;
every warm-up and probe Celery sends is booked as the tenant's cache-creation cost; a
probe measures residency, and an eviction between pins is recorded and shown."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest
from django.utils import timezone

from billing.models import PoolPrice, StorageAccrual, UsageRecord
from caches.models import CacheObject, CacheOperation, CacheState, OperationKind
from caches.services import lifecycle
from caches.services.execution import operation_execute
from caches.services.scheduling import cache_enqueue_due_refreshes, cache_expire_due
from caches.services.storage import cache_storage_accrue_recent
from tests.factories import actor_for
from tests.workers.engine.support import tiny_config
from workers.engine.launcher import serve
from workers.models import Worker

pytestmark = pytest.mark.django_db
MODEL = "test/ref-tiny"
CONTENT = {
    "system_instruction": "You are the support agent of Globex. " * 6,
    "documents": [{"id": "faq", "chunk": 0, "text": "Refunds take five business days. " * 4}],
}


@contextlib.contextmanager
def _workers(*, pool: str, num_blocks: int = 256, count: int = 1):
    with contextlib.ExitStack() as stack:
        rows = []
        for n in range(count):
            running = stack.enter_context(
                serve(
                    tiny_config(
                        num_blocks=num_blocks, max_model_len=512, enable_prompt_tokens_details=True
                    )
                )
            )
            rows.append(
                Worker.objects.create(
                    name=f"w{n}", base_url=running.base_url, model=MODEL, block_size=16, pool=pool
                )
            )
        yield rows


@pytest.fixture
def gpu_b(db) -> PoolPrice:
    """A pool dearer than the seeded default: $9/GPU-hour."""
    return PoolPrice.objects.create(
        pool="gpu-b",
        version=1,
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        gpu_hour_usd=Decimal("9.00"),
        prefill_tokens_per_gpu_second=Decimal(1_000),
        decode_tokens_per_gpu_second=Decimal(100),
        kv_blocks_per_gpu=1_000,
        kv_block_tokens=16,
        source="test fixture",
    )


def _create(tenant, admin, **overrides) -> CacheObject:
    values = {"name": "support", "provider": "vllm", "model": MODEL, "content": CONTENT}
    values.update({"ttl_seconds": 900, **overrides})
    outcome = lifecycle.cache_create(
        tenant=tenant, actor=actor_for(admin), spec=lifecycle.CacheSpec(**values)
    )
    operation_execute(operation_id=str(outcome.operation.pk))
    return CacheObject.objects.all_tenants().get(pk=outcome.operation.cache_id)


def _pin(cache: CacheObject) -> CacheObject:
    """The scheduler's pin: due now, enqueued by the sweep, run like the Celery task."""
    CacheObject.objects.all_tenants().filter(pk=cache.pk).update(next_refresh_at=timezone.now())
    assert cache_enqueue_due_refreshes() >= 1
    op = (
        CacheOperation.objects.all_tenants()
        .filter(cache_id=cache.pk, kind=OperationKind.REFRESH)
        .latest("created_at")
    )
    assert op.requested_by_id is None
    assert operation_execute(operation_id=str(op.pk)) == "succeeded"
    return CacheObject.objects.all_tenants().get(pk=cache.pk)


def test_pins_keep_a_fixed_cache_resident_without_moving_its_expiry_and_it_expires(
    tenant_a, admin_a
) -> None:
    with _workers(pool="default"):
        cache = _create(tenant_a, admin_a)
        assert cache.ttl_policy == "fixed"
        created_expiry = cache.expire_at
        for _ in range(3):
            cache = _pin(cache)
        assert cache.expire_at == created_expiry  # pins re-warm, they do not extend
        assert cache.resident_tokens and cache.resident_checked_at
        assert cache_expire_due(now=created_expiry - timedelta(seconds=1)) == 0
        assert cache_expire_due(now=created_expiry + timedelta(seconds=1)) == 1
        cache.refresh_from_db()
        assert cache.state == CacheState.EXPIRED


def test_a_sliding_vllm_cache_in_use_is_still_extended_by_its_pins(tenant_a, admin_a) -> None:
    with _workers(pool="default"):
        cache = _create(tenant_a, admin_a, ttl_policy="sliding")
        CacheObject.objects.all_tenants().filter(pk=cache.pk).update(
            last_hit_at=timezone.now(), expire_at=timezone.now() + timedelta(seconds=60)
        )
        assert _pin(cache).expire_at > timezone.now() + timedelta(seconds=800)


def test_storage_is_priced_at_the_pool_of_the_worker_holding_the_prefix(
    tenant_a, admin_a, gpu_b
) -> None:
    with _workers(pool="gpu-b"):
        cache = _create(tenant_a, admin_a)
    assert cache.pool == "gpu-b"
    CacheObject.objects.all_tenants().filter(pk=cache.pk).update(
        activated_at=timezone.now() - timedelta(minutes=30)
    )
    assert cache_storage_accrue_recent() >= 1
    accrued = StorageAccrual.objects.all_tenants().filter(cache_id=str(cache.pk))
    assert {(a.pool, a.pool_price_id) for a in accrued} == {("gpu-b", gpu_b.pk)}
    default = PoolPrice.objects.filter(pool="default").latest("version")
    assert default.gpu_hour_usd < gpu_b.gpu_hour_usd  # the default price would undercharge


def test_warm_ups_and_probes_are_booked_as_the_tenants_cache_creation_cost(
    tenant_a, admin_a, gpu_b, redis_flush, django_capture_on_commit_callbacks
) -> None:
    from billing.services.usage import usage_flush

    with _workers(pool="gpu-b", count=2):
        with django_capture_on_commit_callbacks(execute=True):
            cache = _create(tenant_a, admin_a, replication_factor=2)
        with django_capture_on_commit_callbacks(execute=True):
            cache = _pin(cache)
        with django_capture_on_commit_callbacks(execute=True):
            _pin(cache)
    usage_flush()
    rows = list(
        UsageRecord.objects.filter(tenant=tenant_a, cache_id=str(cache.pk)).order_by("request_id")
    )
    assert {(r.kind, r.provider, r.pool) for r in rows} == {("cache_create", "vllm", "gpu-b")}
    warms = [r for r in rows if r.request_id.startswith("cache-warm:")]
    probes = [r for r in rows if r.request_id.startswith("cache-probe:")]
    assert len(warms) == 2 and len(probes) == 4  # one per worker per request sent
    assert sorted(r.worker for r in warms) == ["w0", "w1"]
    # A warm-up computes the whole prefix; a probe that hits only the unaligned tail.
    assert all(r.prompt_tokens == cache.token_count for r in warms)
    assert all(0 < r.prompt_tokens < cache.token_count for r in probes)
    assert all(r.cost_nanos > 0 and r.pool_price_id == gpu_b.pk for r in rows)
    # Booked once: replaying the same operation's bookings inserts nothing.
    assert UsageRecord.objects.filter(tenant=tenant_a).count() == len(rows)


def _evict_by_pressure(worker: Worker) -> None:
    """Other prompts through the worker's small pool push the idle prefix out (LRU)."""
    for n in range(4):
        httpx.post(
            f"{worker.base_url}/v1/completions",
            json={"model": MODEL, "prompt": f"unrelated {n} " * 40, "max_tokens": 1},
            timeout=60,
        ).raise_for_status()


def test_a_probe_that_finds_the_pinned_prefix_evicted_records_it_and_the_console_alerts(
    tenant_a, admin_a, client
) -> None:
    with _workers(pool="default", num_blocks=40) as (worker,):
        cache = _create(tenant_a, admin_a)
        full = (cache.token_count - 1) // 16 * 16
        cache = _pin(cache)  # nothing else ran: wholly resident
        assert (cache.resident_tokens, cache.evicted_seen_at) == (full, None)
        page = f"/t/{tenant_a.slug}/caches/{cache.pk}/"
        client.force_login(admin_a)
        assert b"prefix-evicted" not in client.get(page).content
        _evict_by_pressure(worker)
        cache = _pin(cache)
    assert cache.resident_tokens is not None and cache.resident_tokens < full
    assert cache.evicted_seen_at is not None and cache.state == CacheState.ACTIVE
    latest = cache.transitions.order_by("-at", "-id").first()
    assert "evicted the pinned prefix" in latest.reason and "re-warmed" in latest.reason
    html = client.get(page).content.decode()
    assert (
        'id="prefix-evicted"' in html
        and f"{cache.resident_tokens} of {cache.token_count} tokens" in html
    )


def test_an_economic_vllm_cache_is_created_for_the_autopilots_ttl_at_its_pools_price(
    tenant_a, admin_a, gpu_b
) -> None:
    """Priced before placement: the rendered prefix's tokens at the pool its warm-up goes
    to. At $9/GPU-hour a 1M-token prefix costs $2.50 to prefill (1,000 s at 1,000 tokens/s)
    and $562.50 an hour to hold (62,500 blocks of 1,000 per GPU), so the break-even gap is
    16 s: new content is created for the 60 s minimum, not the 900 s requested."""
    with _workers(pool="gpu-b"):
        cache = _create(tenant_a, admin_a, ttl_policy="economic")
    assert cache.state == CacheState.ACTIVE and cache.pool == "gpu-b"
    assert cache.ttl_seconds == 60
    assert cache.expire_at - timezone.now() <= timedelta(seconds=60)
