"""Storage accrual per cache per hour: prorated, idempotent, stopping at eviction."""

from __future__ import annotations

from datetime import timedelta

import pytest

from billing.errors import InvalidRange, PriceNotFound
from billing.models import StorageAccrual
from billing.services import storage_accrue
from tests.billing.conftest import T0

pytestmark = pytest.mark.django_db

PRO = {"provider": "vertex", "model": "gemini-2.5-pro", "tokens": 100_000}


def _active_pro_cache(tenant, *, name: str, activated_at, expire_at):
    """An active 100,000-token Gemini 2.5 Pro cache ($4.50/M/h: 125 n$ a second)."""
    import uuid

    from caches.models import CacheObject, CacheState

    return CacheObject.objects.create(
        tenant=tenant,
        name=name,
        provider="vertex",
        model="gemini-2.5-pro",
        content={"system_instruction": "x"},
        content_digest=uuid.uuid4().hex,
        token_count=100_000,
        ttl_seconds=int((expire_at - activated_at).total_seconds()),
        expire_at=expire_at,
        state=CacheState.ACTIVE,
        activated_at=activated_at,
    )


def test_ninety_minutes_across_two_clock_hours_are_prorated(tenant_a, price_book) -> None:
    start = T0 + timedelta(minutes=30)
    rows = storage_accrue(
        tenant=tenant_a, cache_id="c1", start=start, end=start + timedelta(minutes=90), **PRO
    )
    # 100k tokens × $4.50/M/h = $0.45/h: 30 min = 225,000 µ$, 60 min = 450,000 µ$.
    assert [(r.hour, r.cost_micros) for r in rows] == [
        (T0, 225_000),
        (T0 + timedelta(hours=1), 450_000),
    ]
    assert rows[0].price_version_id == price_book[("vertex", "gemini-2.5-pro")].pk


def test_repeated_and_overlapping_reports_charge_each_second_once(tenant_a, price_book) -> None:
    for _ in range(2):
        storage_accrue(
            tenant=tenant_a, cache_id="c1", start=T0, end=T0 + timedelta(minutes=20), **PRO
        )
    # The beat task reports the cache again later with a longer interval.
    storage_accrue(
        tenant=tenant_a,
        cache_id="c1",
        start=T0 + timedelta(minutes=10),
        end=T0 + timedelta(minutes=40),
        **PRO,
    )
    row = StorageAccrual.objects.all_tenants().get(cache_id="c1")
    assert (row.covered_from, row.covered_to) == (T0, T0 + timedelta(minutes=40))
    assert row.cost_micros == 300_000  # 40 minutes at $0.45/h


def test_nothing_accrues_after_eviction(tenant_a, price_book) -> None:
    evicted = T0 + timedelta(minutes=5)
    rows = storage_accrue(tenant=tenant_a, cache_id="c1", start=T0, end=evicted, **PRO)
    assert rows[-1].covered_to == evicted
    assert StorageAccrual.objects.all_tenants().filter(hour__gt=T0).count() == 0
    assert storage_accrue(tenant=tenant_a, cache_id="c2", start=T0, end=T0, **PRO) == []


def test_pinned_prefixes_on_a_pool_are_charged_in_kv_block_hours(tenant_a, pool_price) -> None:
    rows = storage_accrue(
        tenant=tenant_a,
        cache_id="pin-1",
        provider="vllm",
        model="llama-3-70b",
        pool="h100-a",
        tokens=1_000,
        start=T0,
        end=T0 + timedelta(minutes=30),
    )
    # 63 blocks × 0.5 h × $2.50 / 10,000 blocks = 7,875 µ$
    assert rows[0].cost_micros == 7_875 and rows[0].pool_price_id == pool_price.pk


def test_bad_intervals_and_unpriced_models_are_refused_and_nothing_is_written(
    tenant_a, price_book
) -> None:
    with pytest.raises(InvalidRange):
        storage_accrue(tenant=tenant_a, cache_id="c1", start=T0, end=T0 - timedelta(1), **PRO)
    with pytest.raises(InvalidRange):
        storage_accrue(
            tenant=tenant_a,
            cache_id="c1",
            start=T0.replace(tzinfo=None),
            end=T0.replace(tzinfo=None),
            **PRO,
        )
    with pytest.raises(PriceNotFound):
        storage_accrue(
            tenant=tenant_a,
            cache_id="c1",
            provider="vertex",
            model="gemini-9",
            tokens=1,
            start=T0,
            end=T0 + timedelta(minutes=1),
        )
    assert not StorageAccrual.objects.all_tenants().exists()


def test_a_reprice_after_a_storage_price_fix_recomputes_accruals(
    tenant_a, price_book, platform_actor
) -> None:
    from billing.services import model_price_correct
    from billing.services.reprice import usage_reprice

    storage_accrue(tenant=tenant_a, cache_id="c1", start=T0, end=T0 + timedelta(hours=1), **PRO)
    model_price_correct(
        actor=platform_actor,
        price=price_book[("vertex", "gemini-2.5-pro")],
        rates={
            "input_per_mtok": "1.25",
            "cached_input_per_mtok": "0.125",
            "storage_per_mtok_hour": "4.00",
            "output_per_mtok": "10",
            "long_threshold_tokens": 200_000,
            "long_input_per_mtok": "2.50",
            "long_cached_input_per_mtok": "0.25",
            "long_output_per_mtok": "15",
        },
        source="storage price fix",
    )
    result = usage_reprice(actor=platform_actor, since=T0)
    assert (result.storage_rows_changed, result.storage_delta_micros) == (1, -50_000)
    assert StorageAccrual.objects.all_tenants().get().cost_micros == 400_000


def test_the_sweep_reads_no_cache_content_and_charges_every_batch(tenant_a, price_book) -> None:
    """Keyset batches of the fields an accrual needs: a cache's content (up to 10 MiB)
    never leaves the database, and every cache is charged whatever the batch size."""
    import uuid

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from caches.models import CacheObject, CacheState
    from caches.services.storage import cache_storage_accrue_recent

    now = timezone.now()
    for n in range(5):
        CacheObject.objects.create(
            tenant=tenant_a,
            name=f"sweep-{n}",
            provider="vertex",
            model="gemini-2.5-pro",
            content={"system_instruction": "x" * 100_000},
            content_digest=uuid.uuid4().hex,
            token_count=100_000,
            ttl_seconds=3_600,
            expire_at=now + timedelta(hours=1),
            state=CacheState.ACTIVE,
            activated_at=now - timedelta(minutes=30),
        )
    with CaptureQueriesContext(connection) as queries:
        rows = cache_storage_accrue_recent(now=now, limit=2)
    assert rows >= 5  # one row per cache per clock hour touched
    charged = StorageAccrual.objects.all_tenants().values_list("cache_id", flat=True).distinct()
    assert len(set(charged)) == 5
    sweeps = [q["sql"] for q in queries.captured_queries if 'FROM "caches_cacheobject"' in q["sql"]]
    assert len(sweeps) == 3  # batches of 2, 2, 1
    assert not any('"caches_cacheobject"."content",' in sql for sql in sweeps)
    assert not any('"caches_cacheobject"."content" ' in sql for sql in sweeps)


def test_a_cache_past_its_expiry_is_accrued_to_the_expiry_however_late_the_sweep_runs(
    tenant_a, price_book
) -> None:
    """The provider dropped the cache at its expiry; the beat's sweep notices 40 minutes
    later (the scheduler has not expired the row yet) and books storage to the expiry."""
    from caches.services.storage import cache_storage_accrue_recent

    expire_at = T0 + timedelta(minutes=20)
    cache = _active_pro_cache(
        tenant_a, name="expired-unnoticed", activated_at=T0, expire_at=expire_at
    )
    for late in (timedelta(minutes=40), timedelta(minutes=90)):  # two sweeps, both late
        cache_storage_accrue_recent(now=expire_at + late)
    (row,) = StorageAccrual.objects.filter(tenant=tenant_a, cache_id=str(cache.pk))
    assert (row.hour, row.covered_from, row.covered_to) == (T0, T0, expire_at)
    # 100,000 tokens × $4.50/M/h × 20 min = 150,000 µ$ (to the first sweep: 450,000 µ$)
    assert (row.cost_nanos, row.cost_micros) == (150_000_000, 150_000)


def test_a_cache_with_no_budget_hold_is_booked_to_its_end_when_it_ends(
    tenant_a, price_book
) -> None:
    """No budget was in place when the cache was created (no storage hold): its end still
    books its storage to the last second at once, not at a later sweep (whose look-back
    is two hours: a cache ended 3 h before the next sweep would have lost its tail)."""
    from django.utils import timezone

    from caches.models import CacheState
    from caches.services.transitions import cache_transition
    from tenants.actor import Actor

    started = timezone.now() - timedelta(minutes=20)
    cache = _active_pro_cache(
        tenant_a, name="no-hold", activated_at=started, expire_at=started + timedelta(hours=1)
    )
    assert cache.budget_reservation_id is None
    cache_transition(
        cache=cache, to_state=CacheState.EXPIRED, actor=Actor.system("test"), reason="test"
    )
    rows = StorageAccrual.objects.filter(tenant=tenant_a, cache_id=str(cache.pk))
    assert rows.exists()
    assert min(r.covered_from for r in rows) == started
    assert max(r.covered_to for r in rows) == cache.ended_at
    seconds = (cache.ended_at - started).total_seconds()
    # 100,000 tokens × $4.50/M/h = 125 n$ per second
    assert sum(r.cost_nanos for r in rows) == pytest.approx(seconds * 125_000, abs=2)
