"""The ledger is the only source of spend (issue 23.1-23.3, 23.6, 23.7, 23.11).

Every cost kind reaches ``BudgetPeriod`` and the gateway's Redis counter through one
booking path when it is booked; holds only reserve. Figures are nano-USD: 1 µ$ = 1,000 n$.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from billing.models import BudgetPeriod, BudgetReservation, UsageRecord, UsageRollup
from billing.services import budget_create, budget_reserve, budget_settle, storage_accrue
from billing.services import budget_reservations as holds
from billing.services.budget_periods import budget_period_ensure
from billing.services.reprice import usage_reprice
from billing.services.usage import (
    book_cost,
    cache_creation_record,
    queue_key,
    usage_estimate_correct,
    usage_flush,
    usage_message,
    usage_record,
    usage_record_many,
)
from tests.billing.ledger_support import FLASH_LITE, figures, gateway_request

pytestmark = pytest.mark.django_db
PRO = "gemini-2.5-pro"  # storage $4.50/M tokens/hour (≤200k): 100k tokens × 1 h = 450,000 µ$


@pytest.fixture
def commits(django_capture_on_commit_callbacks):
    """Run after-commit callbacks (the Redis mirror) as each block commits."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def _budget(tenant, actor, *, limit=10**12):
    return budget_create(
        actor=actor, tenant=tenant, name="month", period="month", limit_micros=limit
    )


def _period(budget, at: datetime) -> BudgetPeriod:
    period = budget_period_ensure(budget=budget, at=at)
    assert period is not None
    return period


def test_every_cost_kind_reaches_the_budget_when_it_is_booked(
    tenant_a, actor, admin_a, api, price_book, pool_price, usage_queue, commits
):
    now = timezone.now()
    period = _period(_budget(tenant_a, actor), now)
    holds.budget_periods_load(tenant_id=str(tenant_a.pk), principal_id=None, at=now)
    with commits():
        gateway_request(tenant_a, at=now)
        usage_record(  # a batch producer's row (never charged on main)
            tenant=tenant_a,
            request_id="batch-1",
            provider="vertex",
            model=PRO,
            occurred_at=now,
            prompt_tokens=1000,
            output_tokens=10,
        )
        cache_creation_record(
            tenant=tenant_a,
            cache_id="c1",
            operation_id="op-1",
            provider="vertex",
            model=PRO,
            tokens=40_000,
            ttl_seconds=3600,
            occurred_at=now,
        )
        book_cost(  # a vLLM warm-up prefill sent by Celery
            tenant=tenant_a,
            ledger_key="warmup:op-2:0",
            provider="vllm",
            model="llama",
            pool="h100-a",
            kind="cache_warmup",
            occurred_at=now,
            prompt_tokens=100_000,
        )
        usage_flush()
        storage_accrue(
            tenant=tenant_a,
            cache_id="c1",
            provider="vertex",
            model=PRO,
            tokens=40_000,
            start=now - timedelta(minutes=30),
            end=now,
        )
    pg, live, ledger = figures(period, at=now)
    assert UsageRecord.objects.filter(tenant=tenant_a).count() == 4
    assert ledger > 0 and pg == live == ledger
    api.force_login(admin_a)
    listed = api.get("/api/v1/tenants/tenant-a/budgets").json()["results"][0]
    assert listed["current_period"]["spent_nanos"] == ledger


def test_a_thousand_half_micro_dollar_requests_make_exactly_500_micro_dollars(
    tenant_a, actor, price_book, usage_queue, commits
):
    now = timezone.now()
    period = _period(_budget(tenant_a, actor), now)
    periods = holds.budget_periods_load(tenant_id=str(tenant_a.pk), principal_id=None, at=now)
    with commits():
        for _ in range(1000):
            gateway_request(tenant_a, at=now, prompt_tokens=5, periods=periods)  # 500 n$ each
        usage_flush()
    assert figures(period, at=now) == (500_000, 500_000, 500_000)
    assert BudgetPeriod.objects.all_tenants().get(pk=period.pk).spent_micros == 500
    # Every pending hold was dropped by the booking: nothing reserved twice.
    assert holds.budget_period_live(period_id=period.pk)["reserved"] == 0


def test_the_same_client_id_three_times_books_three_rows_and_replays_book_nothing(
    tenant_a, actor, price_book, usage_queue, commits
):
    from controlplane import ops

    now = timezone.now()
    period = _period(_budget(tenant_a, actor), now)
    with commits():
        keys = [gateway_request(tenant_a, at=now) for _ in range(3)]
        replay = ops.redis_client().lrange(queue_key(), 0, -1)
        usage_flush()
        holds.budget_settlements_flush()
        usage_record_many(list(replay))  # the gateway's own retry of the same batch
        assert usage_flush().inserted == 0
    rows = UsageRecord.objects.filter(tenant=tenant_a)
    assert sorted(rows.values_list("request_id", flat=True)) == sorted(keys)
    assert set(rows.values_list("client_request_id", flat=True)) == {"client-reused-id"}
    settled = BudgetReservation.objects.filter(tenant=tenant_a, state="settled")
    assert sorted(settled.values_list("request_id", flat=True)) == sorted(keys)
    assert figures(period, at=now) == (1500, 1500, 1500)


def test_storage_is_booked_as_it_accrues_and_reprice_or_the_final_settle_adds_nothing(
    tenant_a, actor, platform_actor, price_book, usage_queue, commits
):
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    if now.day == 1 and now.hour < 2:
        now += timedelta(hours=2)  # keep the two hours inside one month
    period = _period(_budget(tenant_a, actor), now)
    with commits():
        hold = budget_reserve(
            tenant=tenant_a,
            principal=None,
            estimate_micros=900_000,
            request_id="cache:c9",
            kind="cache_storage",
        )
        storage_accrue(
            tenant=tenant_a,
            cache_id="c9",
            provider="vertex",
            model=PRO,
            tokens=100_000,
            start=now - timedelta(hours=2),
            end=now - timedelta(hours=1),
        )
    booked = BudgetPeriod.objects.all_tenants().get(pk=period.pk)
    assert booked.spent_nanos == 450_000_000  # one hour, booked now, not at the end
    assert booked.reserved_micros == 450_000  # the hold shrank by what was booked
    with commits():
        usage_reprice(actor=platform_actor, since=now - timedelta(days=1), tenant=tenant_a)
        budget_settle(reservation=hold, actual_micros=450_000)
    assert figures(period, at=now) == (450_000_000, 450_000_000, 450_000_000)
    assert BudgetPeriod.objects.all_tenants().get(pk=period.pk).reserved_micros == 0


def test_a_period_created_mid_period_counts_storage_once(
    tenant_a, actor, price_book, usage_queue, commits
):
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    if now.day == 1 and now.hour < 3:
        now += timedelta(hours=3)
    common = {"tenant": tenant_a, "cache_id": "c3", "provider": "vertex", "model": PRO}
    with commits():
        storage_accrue(
            **common, tokens=100_000, start=now - timedelta(hours=3), end=now - timedelta(hours=2)
        )
        period = _period(_budget(tenant_a, actor), now)  # seeded: 450,000 µ$
        storage_accrue(
            **common, tokens=100_000, start=now - timedelta(hours=3), end=now - timedelta(hours=1)
        )
    assert figures(period, at=now) == (900_000_000,) * 3


def test_a_cache_across_a_month_boundary_charges_each_month_its_own_share(
    tenant_a, actor, price_book, usage_queue, commits
):
    midnight = datetime(2026, 4, 1, tzinfo=UTC)
    budget = _budget(tenant_a, actor)
    march, april = _period(budget, midnight - timedelta(hours=1)), _period(budget, midnight)
    with commits():
        storage_accrue(
            tenant=tenant_a,
            cache_id="c-boundary",
            provider="vertex",
            model=PRO,
            tokens=100_000,
            start=midnight - timedelta(hours=1),
            end=midnight + timedelta(hours=2),
        )
    assert figures(march, at=midnight - timedelta(hours=1)) == (450_000_000,) * 3
    assert figures(april, at=midnight) == (900_000_000,) * 3


def test_a_token_count_change_mid_hour_is_priced_once_at_each_count(
    tenant_a, actor, price_book, usage_queue, commits
):
    hour = datetime(2026, 3, 2, 10, tzinfo=UTC)
    period = _period(_budget(tenant_a, actor), hour)
    common = {"tenant": tenant_a, "cache_id": "c-grow", "provider": "vertex", "model": PRO}
    with commits():
        storage_accrue(**common, tokens=100_000, start=hour, end=hour + timedelta(minutes=30))
        # Reported again (overlapping) at the new count: only the second half is priced at it.
        storage_accrue(**common, tokens=200_000, start=hour, end=hour + timedelta(hours=1))
        storage_accrue(**common, tokens=200_000, start=hour, end=hour + timedelta(hours=1))
    # 100k × 0.5 h × $4.50 + 200k × 0.5 h × $4.50 = 225,000 + 450,000 µ$.
    assert figures(period, at=hour) == (675_000_000,) * 3


def test_a_timed_out_request_books_its_reservation_as_an_estimate_then_the_report(
    tenant_a, actor, price_book, usage_queue, commits
):
    now = timezone.now()
    period = _period(_budget(tenant_a, actor), now)
    with commits():
        usage_record_many(
            [
                usage_message(
                    tenant=tenant_a,
                    request_id="gw-timed-out",
                    provider="vertex",
                    model=FLASH_LITE,
                    occurred_at=now,
                    prompt_tokens=0,
                    status="upstream_timeout",
                    estimate_nanos=7_000_000,  # the 7,000 µ$ hold
                )
            ]
        )
        usage_flush()
    row = UsageRecord.objects.get(tenant=tenant_a, request_id="gw-timed-out")
    assert (row.estimated, row.cost_nanos) == (True, 7_000_000)
    assert figures(period, at=now) == (7_000_000,) * 3
    with commits():
        corrected = usage_estimate_correct(
            tenant=tenant_a, ledger_key="gw-timed-out", prompt_tokens=5, output_tokens=0
        )
    assert (corrected.estimated, corrected.cost_nanos) == (False, 500)
    assert figures(period, at=now) == (500,) * 3
    day = UsageRollup.objects.get(tenant=tenant_a, granularity="day", model=FLASH_LITE)
    assert (day.cost_nanos, day.cost_micros) == (500, 0)


def test_a_cold_redis_cache_reloads_the_exact_figure(
    tenant_a, actor, price_book, usage_queue, commits
):
    from controlplane import ops

    now = timezone.now()
    period = _period(_budget(tenant_a, actor), now)
    with commits():
        for _ in range(3):
            gateway_request(tenant_a, at=now)
        usage_flush()
    client = ops.redis_client()
    client.delete(*holds.period_keys(period.pk))  # a Redis restart without persistence
    assert figures(period, at=now) == (1500, 1500, 1500)
