"""The TTL autopilot as the app runs it: scheduler reviews, hit flushes, budget coupling;
and storage accrual over a fleet larger than one batch."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from billing.errors import BudgetNearLimit
from billing.models import BudgetPeriod, BudgetReservation, StorageAccrual, TtlProfile
from billing.services import budget_create, budget_reserve_cache_storage
from caches.models import CacheObject, CacheOperation, CacheState, TtlPolicy
from caches.services.hits import CACHE_HITS_KEY, cache_hits_flush
from caches.services.scheduling import cache_enqueue_due_refreshes
from caches.services.storage import cache_storage_accrue_recent

pytestmark = pytest.mark.django_db
DOLLAR = 1_000_000


def _cache(tenant, *, now, expire_in: float = 3_000, digest: str | None = None, **fields):
    values = {
        "ttl_policy": TtlPolicy.ECONOMIC,
        "next_refresh_at": now - timedelta(seconds=1),
        **fields,
    }
    return CacheObject.objects.create(
        tenant=tenant,
        name=f"c-{uuid.uuid4().hex[:8]}",
        provider="vertex",
        model="gemini-2.5-pro",
        content={"system": "x"},
        content_digest=digest or uuid.uuid4().hex,
        token_count=100_000,
        ttl_seconds=3_600,
        expire_at=now + timedelta(seconds=expire_in),
        state=CacheState.ACTIVE,
        activated_at=now - timedelta(hours=1),
        **values,
    )


def _profile(cache, *, now, gaps, last_ago: float = 10.0) -> None:
    TtlProfile.objects.create(
        tenant=cache.tenant,
        provider=cache.provider,
        model=cache.model,
        content_digest=cache.content_digest,
        gaps_seconds=list(gaps),
        last_query_at=now - timedelta(seconds=last_ago),
    )


def _refreshes(cache) -> list[CacheOperation]:
    return list(CacheOperation.objects.all_tenants().filter(cache=cache, kind="refresh"))


def _near_budget(tenant, actor, *, percent: int) -> None:
    budget = budget_create(
        actor=actor,
        tenant=tenant,
        name="month",
        period="month",
        limit_micros=100 * DOLLAR,
        hard_limit=True,
    )
    from billing.services.budget_periods import budget_period_ensure

    period = budget_period_ensure(budget=budget, at=timezone.now())
    BudgetPeriod.objects.all_tenants().filter(pk=period.pk).update(spent_micros=percent * DOLLAR)


def test_the_scheduler_sets_the_expiry_to_the_last_query_plus_the_learned_keep_alive(
    tenant_a, price_book
) -> None:
    now = timezone.now()
    cache = _cache(tenant_a, now=now)
    # Sessions: quick follow-ups 100 s apart, long pauses of 5,000 s between them. For
    # 100k tokens on 2.5 Pro the break-even gap is (1.25 - 0.125) / 4.50 h = 900 s, so
    # the learned keep-alive bridges the 100 s gaps only, each smoothed over 50-200 s
    # (GAP_SPREAD): k = 200 × 1.05 + 1 = 211 s.
    _profile(cache, now=now, gaps=[100.0, 5_000.0] * 10)
    assert cache_enqueue_due_refreshes(now=now) == 1
    (operation,) = _refreshes(cache)
    # last query 10 s ago + 211 s = 201 s from now (the 1-hour TTL it had is cut short).
    assert operation.params["ttl_seconds"] == 201
    assert operation.params["reason"].startswith("autopilot: shorten")
    cache.refresh_from_db()
    assert cache.next_refresh_at is None
    # Run twice: nothing is due any more, nothing new is enqueued.
    assert cache_enqueue_due_refreshes(now=now) == 0
    assert len(_refreshes(cache)) == 1


def test_a_cache_on_target_is_left_alone_and_reviewed_before_its_expiry(
    tenant_a, price_book
) -> None:
    now = timezone.now()
    cache = _cache(tenant_a, now=now, expire_in=201)
    _profile(cache, now=now, gaps=[100.0, 5_000.0] * 10)
    cache_enqueue_due_refreshes(now=now)
    cache.refresh_from_db()
    assert _refreshes(cache) == []
    review = cache.next_refresh_at - now
    assert timedelta(seconds=170) <= review <= timedelta(seconds=172)  # expiry - 30 s


def test_near_a_budget_limit_ttls_shorten_refreshes_stop_and_new_pins_are_refused(
    tenant_a, actor, price_book
) -> None:
    _near_budget(tenant_a, actor, percent=95)
    now = timezone.now()
    # A busy context (gaps of 60 s: keep-alive would be G* = 900 s) is cut to 300 s.
    busy = _cache(tenant_a, now=now)
    _profile(busy, now=now, gaps=[60.0] * 20, last_ago=0)
    cache_enqueue_due_refreshes(now=now)
    assert [op.params["ttl_seconds"] for op in _refreshes(busy)] == [300]
    # A cache about to run out is not refreshed any more.
    ending = _cache(tenant_a, now=now, expire_in=40)
    _profile(ending, now=now, gaps=[60.0] * 20, last_ago=0)
    cache_enqueue_due_refreshes(now=now)
    assert _refreshes(ending) == []
    # And no new cache may be pinned: refused, audited, nothing held.
    with pytest.raises(BudgetNearLimit) as raised:
        budget_reserve_cache_storage(
            tenant=tenant_a,
            principal=None,
            request_id="cache:new",
            provider="vertex",
            model="gemini-2.5-pro",
            tokens=100_000,
            ttl=timedelta(hours=1),
        )
    assert raised.value.code == "budget_near_limit" and raised.value.http_status == 402
    assert not BudgetReservation.objects.all_tenants().filter(request_id="cache:new").exists()
    assert AuditEvent.objects.filter(action="billing.budget.pin_refused").count() == 1


def test_over_the_limit_live_caches_are_dropped_at_the_next_review(
    tenant_a, actor, price_book
) -> None:
    _near_budget(tenant_a, actor, percent=100)
    now = timezone.now()
    cache = _cache(tenant_a, now=now)
    _profile(cache, now=now, gaps=[60.0] * 20, last_ago=0)
    cache_enqueue_due_refreshes(now=now)
    assert [op.params["ttl_seconds"] for op in _refreshes(cache)] == [60]


def test_a_hit_flush_teaches_the_profile_and_asks_for_an_extension(
    tenant_a, price_book, redis_flush
) -> None:
    now = timezone.now()
    cache = _cache(tenant_a, now=now, expire_in=20, next_refresh_at=None)
    _profile(cache, now=now, gaps=[60.0] * 5, last_ago=60)
    redis_flush.hincrby(CACHE_HITS_KEY, f"{cache.pk}:count", 2)
    redis_flush.hincrby(CACHE_HITS_KEY, f"{cache.pk}:tokens", 200_000)
    assert cache_hits_flush() == 1
    profile = TtlProfile.objects.all_tenants().get(content_digest=cache.content_digest)
    # Two more uses learned (one ~60 s after the last, one 0 s after that one).
    assert len(profile.gaps_seconds) == 7 and profile.queries == 2
    cache.refresh_from_db()
    assert cache.next_refresh_at is not None  # due now: the scheduler extends it
    cache_enqueue_due_refreshes(now=timezone.now())
    (operation,) = _refreshes(cache)
    assert operation.params["ttl_seconds"] > 20


def test_storage_accrues_for_every_cache_of_a_fleet_larger_than_one_batch(
    tenant_a, price_book
) -> None:
    now = timezone.now()
    caches = [
        _cache(tenant_a, now=now, ttl_policy=TtlPolicy.FIXED, next_refresh_at=None)
        for _ in range(5)
    ]
    cache_storage_accrue_recent(now=now, limit=2)
    charged = set(StorageAccrual.objects.all_tenants().values_list("cache_id", flat=True))
    assert charged == {str(c.pk) for c in caches}
    # Run twice: idempotent, the same figures.
    before = sorted(StorageAccrual.objects.all_tenants().values_list("cost_nanos", flat=True))
    cache_storage_accrue_recent(now=now, limit=2)
    assert (
        sorted(StorageAccrual.objects.all_tenants().values_list("cost_nanos", flat=True)) == before
    )


def _remote_ttl_left(vertex) -> float:
    (stored,) = vertex.stored_caches()
    return (stored.expire_time - timezone.now()).total_seconds()


def test_budget_coupling_end_to_end_through_the_beat_task_the_worker_and_vertex(
    api,
    vertex,
    tenant_a,
    admin_a,
    actor,
    price_book,
    celery_eager,
    django_capture_on_commit_callbacks,
) -> None:
    from caches.tasks import cache_schedule_refreshes_task
    from tests.caches.conftest import big_content

    api.force_login(admin_a)
    url = f"/api/v1/tenants/{tenant_a.slug}/caches"
    body = {
        "name": "contracts",
        "provider": "vertex",
        "model": "gemini-2.5-flash",
        "content": big_content(),
        "ttl_seconds": 3_600,
        "ttl_policy": "economic",
    }
    with django_capture_on_commit_callbacks(execute=True):  # the worker runs the create
        created = api.post(url, body, format="json")
    assert created.status_code == 202, created.json()
    cache = CacheObject.objects.all_tenants().get(pk=created.json()["cache"])
    # Created with the autopilot's answer, not the requested hour: no use known yet, so the
    # rent-or-buy gap. 2.5 Flash: (0.30 - 0.03) / 1.00 per hour = 0.27 h = 972 s.
    assert cache.state == CacheState.ACTIVE and 940 < _remote_ttl_left(vertex) <= 972

    def beat() -> None:
        CacheObject.objects.all_tenants().filter(pk=cache.pk).update(next_refresh_at=timezone.now())
        with django_capture_on_commit_callbacks(execute=True):
            cache_schedule_refreshes_task()  # the beat entry; the refresh runs on the worker

    # No budget pressure, one use known (the creation): on target, it stays.
    beat()
    assert 940 < _remote_ttl_left(vertex) <= 972
    # 95 % of a hard budget used: TTLs are capped at 5 minutes.
    _near_budget(tenant_a, actor, percent=95)
    beat()
    assert 270 < _remote_ttl_left(vertex) <= 300
    # New pins are refused before anything is sent to Vertex; nothing is held.
    creates = len(vertex.create_requests())
    with django_capture_on_commit_callbacks(execute=True):
        refused = api.post(
            url, {**body, "name": "more", "content": big_content("m")}, format="json"
        )
    assert refused.status_code == 402 and refused.json()["error"]["code"] == "budget_near_limit"
    assert len(vertex.create_requests()) == creates
    assert CacheObject.objects.all_tenants().filter(tenant=tenant_a).count() == 1
    # Over the limit: the next review cuts the cache to the 60 s minimum.
    BudgetPeriod.objects.all_tenants().filter(tenant=tenant_a).update(spent_micros=100 * DOLLAR)
    beat()
    assert 30 < _remote_ttl_left(vertex) <= 60
    refreshes = CacheOperation.objects.all_tenants().filter(cache=cache, kind="refresh")
    assert sorted(op.params["ttl_seconds"] for op in refreshes)[:1] == [60]
    assert {op.status for op in refreshes} == {"succeeded"}
