"""Every cost booked, at sub-µ$ precision, and every figure equal to the raw ledger.

Hand computations use published prices (see test_price_matrix.py's docstring); 1 µ$ =
1,000 n$.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from audit.models import AuditEvent
from billing.errors import InvalidPrice
from billing.models import (
    BudgetPeriod,
    Granularity,
    ModelPrice,
    StorageAccrual,
    UsageKind,
    UsageRecord,
    UsageRollup,
)
from billing.pricing import nanos_to_micros
from billing.selectors.usage import savings_summary, spend_grouped
from billing.selectors.usage_quotes import usage_estimate_micros
from billing.services import (
    budget_create,
    budget_reserve,
    budget_settle,
    cache_creation_record,
    model_price_correct,
    storage_accrue,
    usage_flush,
    usage_record,
)
from billing.services.reprice import usage_reprice
from billing.services.usage import usage_message, usage_record_many
from tests.billing.conftest import T0

pytestmark = pytest.mark.django_db
DOLLAR = 1_000_000


def _record(tenant, request_id: str, **fields) -> None:
    usage_record(
        **{
            "tenant": tenant,
            "request_id": request_id,
            "provider": "vertex",
            "model": "gemini-2.5-pro",
            "occurred_at": T0,
            "prompt_tokens": 0,
            **fields,
        }
    )


def test_ten_thousand_five_token_flash_lite_requests_book_exactly_5000_micro_dollars(
    tenant_a, price_book, usage_queue
) -> None:
    messages = [
        usage_message(
            tenant=tenant_a,
            request_id=f"tiny-{i}",
            provider="vertex",
            model="gemini-2.5-flash-lite",
            occurred_at=T0 + timedelta(milliseconds=i),
            prompt_tokens=5,
        )
        for i in range(10_000)
    ]
    usage_record_many(messages)
    assert usage_flush(batch_size=5_000).inserted == 10_000
    # Each row: 5 × $0.10/M = 0.5 µ$ = 500 n$; the sum is 5,000,000 n$ = 5,000 µ$.
    assert UsageRecord.objects.all_tenants().aggregate(n=Sum("cost_nanos"))["n"] == 5_000_000
    day = UsageRollup.objects.all_tenants().get(tenant=tenant_a, granularity=Granularity.DAY)
    assert (day.cost_nanos, day.cost_micros) == (5_000_000, 5_000)
    summary = savings_summary(tenant=tenant_a, since=T0, until=T0 + timedelta(hours=1))
    assert summary.spent_micros == 5_000 and summary.unpriced_requests == 0


def test_thinking_audio_and_a_partial_stream_are_booked_in_full(
    tenant_a, price_book, usage_queue
) -> None:
    # 2.5 Pro: 2,200 prompt × 1.25 + 300 output × 10 + 1,800 thinking × 10 = 23,750 µ$.
    _record(tenant_a, "think", prompt_tokens=2_200, output_tokens=300, thinking_tokens=1_800)
    # 2.5 Flash: 6,000 text × 0.30 + 4,000 audio × 1.00 + 100 output × 2.50 = 6,050 µ$.
    _record(
        tenant_a,
        "audio",
        model="gemini-2.5-flash",
        prompt_tokens=10_000,
        audio_prompt_tokens=4_000,
        output_tokens=100,
    )
    # A disconnected stream: the prompt and the 37 tokens streamed before the end:
    # 1,000 × 1.25 + 4,000 × 0.125 + 37 × 10 = 2,120 µ$.
    _record(
        tenant_a,
        "cut",
        prompt_tokens=5_000,
        cached_read_tokens=4_000,
        output_tokens=37,
        status="client_disconnect",
        stream=True,
    )
    usage_flush()
    cost = dict(UsageRecord.objects.all_tenants().values_list("request_id", "cost_micros"))
    assert cost == {"think": 23_750, "audio": 6_050, "cut": 2_120}
    pro = UsageRollup.objects.all_tenants().get(granularity=Granularity.DAY, model="gemini-2.5-pro")
    assert (pro.thinking_tokens, pro.error_requests, pro.cost_micros) == (1_800, 1, 25_870)


def test_deepseek_is_priced_with_hit_and_miss_rates_and_the_off_peak_window(
    tenant_a, price_book, usage_queue
) -> None:
    counts = {"prompt_tokens": 10_000, "cached_read_tokens": 6_400, "output_tokens": 500}
    _record(tenant_a, "peak", provider="deepseek", model="deepseek-chat", **counts)
    _record(
        tenant_a,
        "night",
        provider="deepseek",
        model="deepseek-chat",
        occurred_at=T0.replace(hour=17),
        **counts,
    )
    usage_flush()
    # 3,600 × 0.27 + 6,400 × 0.07 + 500 × 1.10 = 1,970 µ$; off-peak 50 % = 985 µ$.
    cost = dict(UsageRecord.objects.all_tenants().values_list("request_id", "cost_micros"))
    assert cost == {"peak": 1_970, "night": 985}


def test_a_pool_without_its_own_price_is_charged_at_the_seeded_default(
    tenant_a, price_book, usage_queue
) -> None:
    from billing.models import PoolPrice

    default = PoolPrice.objects.get(pool="default")
    _record(tenant_a, "gpu", provider="vllm", model="llama", pool="rack-7", prompt_tokens=46_000)
    usage_flush()
    row = UsageRecord.objects.all_tenants().get(request_id="gpu")
    # Seeded default: $2.50/GPU-hour, 4,600 prefill tokens/GPU-s: 46,000 tokens = 10 GPU-s
    # = 10 × 2.5 / 3,600 $ = 6,944.44 µ$ = 6,944,444 n$.
    assert row.pool_price_id == default.pk and row.cost_nanos == 6_944_444


def test_unpriced_usage_is_counted_loudly(tenant_a, price_book, usage_queue) -> None:
    _record(tenant_a, "mystery", model="gemini-9-ultra", prompt_tokens=1_000)
    usage_flush()
    rows = spend_grouped(tenant=tenant_a, since=T0, until=T0 + timedelta(hours=1), group_by="model")
    assert rows[0]["unpriced_requests"] == 1 and rows[0]["spent_micros"] == 0
    summary = savings_summary(tenant=tenant_a, since=T0, until=T0 + timedelta(hours=1))
    assert summary.unpriced_requests == 1


def test_a_vertex_cache_creation_is_booked_once_as_the_write_of_its_tokens(
    tenant_a, price_book, usage_queue
) -> None:
    for _ in range(2):  # a retried creation books once
        cache_creation_record(
            tenant=tenant_a,
            cache_id="c-1",
            operation_id="op-1",
            provider="vertex",
            model="gemini-2.5-pro",
            tokens=100_000,
            ttl_seconds=3_600,
            occurred_at=T0,
        )
        usage_flush()
    row = UsageRecord.objects.all_tenants().get(tenant=tenant_a)
    # 100,000 × $1.25/M = 125,000 µ$; creation saves nothing.
    assert (row.kind, row.cost_micros, row.cost_without_cache_micros) == (
        UsageKind.CACHE_CREATE,
        125_000,
        0,
    )
    summary = savings_summary(tenant=tenant_a, since=T0, until=T0 + timedelta(hours=1))
    assert summary.saved_micros == -125_000


def test_a_partial_correction_changes_only_what_it_names(price_book, platform_actor) -> None:
    pro = price_book[("vertex", "gemini-2.5-pro")]
    fixed = model_price_correct(
        actor=platform_actor, price=pro, rates={"output_per_mtok": "11"}, source="typo"
    )
    assert fixed.output_per_mtok == Decimal("11")
    assert fixed.storage_per_mtok_hour == Decimal("4.50")  # not zeroed
    assert (fixed.long_threshold_tokens, fixed.long_input_per_mtok) == (200_000, Decimal("2.50"))
    event = AuditEvent.objects.filter(action="billing.price.correct").latest("seq")
    # Rates: only the corrected one moved; the rest is the new version's bookkeeping.
    rates = {name for name in event.changes if name.endswith(("_per_mtok", "_per_mtok_hour"))}
    assert rates == {"output_per_mtok"}
    assert "version" in event.changes


def test_a_correction_with_an_unknown_field_is_refused_and_writes_nothing(
    price_book, platform_actor
) -> None:
    pro = price_book[("vertex", "gemini-2.5-pro")]
    before = ModelPrice.objects.count()
    with pytest.raises(InvalidPrice) as raised:
        model_price_correct(
            actor=platform_actor, price=pro, rates={"outptu_per_mtok": "11"}, source="typo"
        )
    assert raised.value.code == "invalid_price"
    assert ModelPrice.objects.count() == before
    pro.refresh_from_db()
    assert pro.superseded_at is None


def test_the_reservation_bound_includes_the_cache_and_the_model_maximum_output(
    price_book,
) -> None:
    # The cached Vertex request: 1,000 prompt + 100,000 cache tokens, max output
    # 65,536: 101,000 × 1.25 + 65,536 × 10 = 126,250 + 655,360 = 781,610 µ$, above the
    # 217,500 µ$ such a request can cost at most with 10,000 output tokens.
    bound = usage_estimate_micros(
        provider="vertex",
        model="gemini-2.5-pro",
        prompt_tokens=1_000,
        cache_tokens=100_000,
        max_output_tokens=65_536,
        at=T0,
    )
    assert bound == 781_610


def test_storage_keeps_each_second_at_the_token_count_it_had(tenant_a, price_book) -> None:
    common = {"tenant": tenant_a, "cache_id": "c", "provider": "vertex", "model": "gemini-2.5-pro"}
    storage_accrue(**common, tokens=100_000, start=T0, end=T0 + timedelta(minutes=20))
    # The count grows to 160,000 at 10:20; the beat reports the hour again from 10:00.
    storage_accrue(**common, tokens=160_000, start=T0, end=T0 + timedelta(minutes=60))
    rows = StorageAccrual.objects.all_tenants().filter(cache_id="c").order_by("covered_from")
    # 100,000 × 4.50 × 1/3 h = 150,000 µ$; 160,000 × 4.50 × 2/3 h = 480,000 µ$
    # (a whole hour at the latest count would be 720,000 µ$: +14 %).
    assert [(r.tokens, r.cost_micros) for r in rows] == [(100_000, 150_000), (160_000, 480_000)]


def test_reprice_recomputes_ledger_rollups_savings_and_budget_counters(
    tenant_a, actor, price_book, usage_queue, platform_actor
) -> None:
    budget_create(
        actor=actor,
        tenant=tenant_a,
        name="month",
        period="month",
        limit_micros=1_000 * DOLLAR,
        hard_limit=True,
    )
    now = T0.__class__.now(tz=T0.tzinfo)
    at = now - timedelta(minutes=5)
    for i in range(7):
        reservation = budget_reserve(
            tenant=tenant_a, principal=None, estimate_micros=100_000, request_id=f"r{i}"
        )
        _record(
            tenant_a,
            f"r{i}",
            occurred_at=at + timedelta(seconds=i),
            prompt_tokens=10_001 + i,
            cached_read_tokens=9_000,
            output_tokens=333,
        )
        budget_settle(reservation=reservation, actual_micros=1)  # a wrong settle figure
    storage_accrue(
        tenant=tenant_a,
        cache_id="c",
        provider="vertex",
        model="gemini-2.5-pro",
        tokens=100_003,
        start=at,
        end=at + timedelta(seconds=77),
    )
    usage_flush()
    pro = price_book[("vertex", "gemini-2.5-pro")]
    model_price_correct(
        actor=platform_actor,
        price=pro,
        rates={"input_per_mtok": "1.3", "storage_per_mtok_hour": "4.7"},
        source="fix",
    )
    result = usage_reprice(actor=platform_actor, since=at - timedelta(hours=1))
    assert result.rows_changed == 7 and result.budget_periods_recomputed == 1

    ledger = UsageRecord.objects.all_tenants().filter(tenant=tenant_a)
    raw_nanos = ledger.aggregate(n=Sum("cost_nanos"))["n"]
    # Each row recomputed from its raw counts at the corrected price, exactly:
    # uncached (1,001 + i) × 1.3 + 9,000 × 0.125 + 333 × 10 µ$.
    expected = sum((1_001 + i) * 1_300 + 9_000 * 125 + 333 * 10_000 for i in range(7))
    assert raw_nanos == expected
    for granularity in (Granularity.MINUTE, Granularity.DAY):
        rollups = UsageRollup.objects.all_tenants().filter(tenant=tenant_a, granularity=granularity)
        assert rollups.aggregate(n=Sum("cost_nanos"))["n"] == raw_nanos
        for rollup in rollups:
            assert rollup.cost_micros == nanos_to_micros(rollup.cost_nanos)
    storage_nanos = StorageAccrual.objects.all_tenants().aggregate(n=Sum("cost_nanos"))["n"]
    # 100,003 × 4.70 = 470,014.1; × 77 s / 3,600 s = 10,053.0794 µ$ → 10,053,079 n$
    assert storage_nanos == 10_053_079
    period = BudgetPeriod.objects.all_tenants().get(tenant=tenant_a)
    assert period.spent_micros == nanos_to_micros(raw_nanos + storage_nanos)
    summary = savings_summary(tenant=tenant_a, since=at - timedelta(hours=1), until=now)
    assert summary.spent_micros == nanos_to_micros(raw_nanos + storage_nanos)
    without = ledger.aggregate(n=Sum("cost_without_cache_nanos"))["n"]
    assert summary.saved_micros == nanos_to_micros(without - raw_nanos - storage_nanos)
    # Running it again changes nothing.
    again = usage_reprice(actor=platform_actor, since=at - timedelta(hours=1))
    assert (again.rows_changed, again.budget_delta_nanos) == (0, 0)


def _gateway_reserve(periods, *, hold_id: str, amount: int):
    """The gateway's reserve script on Redis: None when held, else the refusal."""
    from billing.services import budget_reservations as holds
    from controlplane import ops
    from controlplane.redis.budget import budget_reserve

    call = holds.reserve_call(
        periods=periods, hold_id=hold_id, amount_micros=amount, ttl_seconds=60
    )
    return holds.reserve_outcome(budget_reserve(ops.redis_client(), call), periods)


def _gateway_hold_and_settle(periods, *, tenant, hold_id: str, amount: int, actual: int) -> None:
    """What the gateway does per request: the reserve and settle scripts on Redis."""
    from billing.services import budget_reservations as holds
    from controlplane import ops
    from controlplane.redis.budget import budget_settle

    client = ops.redis_client()
    assert _gateway_reserve(periods, hold_id=hold_id, amount=amount) is None
    call = holds.settle_call(
        periods=periods,
        hold_id=hold_id,
        tenant_id=str(tenant.pk),
        principal_id=None,
        amount_micros=amount,
        actual_micros=actual,
    )
    assert budget_settle(client, call) is True


def test_reprice_moves_the_gateways_redis_counters_with_the_database_and_the_ledger(
    tenant_a, actor, price_book, usage_queue, platform_actor, django_capture_on_commit_callbacks
) -> None:
    from billing.services import budget_reservations as holds

    limit = 1_000 * DOLLAR
    budget = budget_create(
        actor=actor,
        tenant=tenant_a,
        name="month",
        period="month",
        limit_micros=limit,
        hard_limit=True,
    )
    now = T0.__class__.now(tz=T0.tzinfo)
    at = now - timedelta(minutes=5)
    periods = holds.budget_periods_load(tenant_id=str(tenant_a.pk), principal_id=None)
    for i in range(7):
        # 2.5 Pro, (1,001 + i) uncached × 1.25 + 9,000 cached × 0.125 + 333 out × 10 µ$;
        # the gateway settles each at its own figure rounded to the µ$ (a pending hold),
        # and books the row under the same ledger key.
        nanos = (1_001 + i) * 1_250 + 9_000 * 125 + 333 * 10_000
        _gateway_hold_and_settle(
            periods,
            tenant=tenant_a,
            hold_id=f"gw-{i}",
            amount=100_000,
            actual=nanos_to_micros(nanos),
        )
        _record(
            tenant_a,
            f"gw-{i}",
            occurred_at=at + timedelta(seconds=i),
            prompt_tokens=10_001 + i,
            cached_read_tokens=9_000,
            output_tokens=333,
        )
    # A cache's storage hold lives in PostgreSQL (the caches app's path): 100,003 tokens
    # for 77 s at $4.50/M/h = 9,625.29 µ$, booked as it accrues; the settle adds nothing.
    storage = budget_reserve(
        tenant=tenant_a,
        principal=None,
        estimate_micros=20_000,
        request_id="cache:c",
        kind="cache_storage",
    )
    with django_capture_on_commit_callbacks(execute=True):
        storage_accrue(
            tenant=tenant_a,
            cache_id="c",
            provider="vertex",
            model="gemini-2.5-pro",
            tokens=100_003,
            start=at,
            end=at + timedelta(seconds=77),
        )
        budget_settle(reservation=storage, actual_micros=9_625)
        holds.budget_settlements_flush()
        usage_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    before_nanos = sum((1_001 + i) * 1_250 + 9_000 * 125 + 333 * 10_000 for i in range(7))
    before_nanos += StorageAccrual.objects.all_tenants().aggregate(n=Sum("cost_nanos"))["n"]
    live = holds.budget_period_live(period_id=period.pk)
    # Redis and PostgreSQL both follow the ledger, to the n$; no hold is left pending.
    assert period.spent_nanos == live["spent_nanos"] == before_nanos
    assert (period.reserved_micros, live["reserved"]) == (0, 0)

    model_price_correct(
        actor=platform_actor,
        price=price_book[("vertex", "gemini-2.5-pro")],
        rates={"input_per_mtok": "1.3", "storage_per_mtok_hour": "4.7"},
        source="fix",
    )
    with django_capture_on_commit_callbacks(execute=True):
        result = usage_reprice(actor=platform_actor, since=at - timedelta(hours=1))
    assert (result.rows_changed, result.storage_rows_changed) == (7, 1)

    # By hand at the corrected price: requests Σ (1,001 + i) × 1,300 + 9,000 × 125 +
    # 333 × 10,000 n$ = 9,136,400 + 7,875,000 + 23,310,000 = 40,321,400 n$; storage
    # 100,003 × 4.70 × 77 / 3,600 = 10,053,079 n$; total 50,374,479 n$ = 50,374 µ$.
    ledger = UsageRecord.objects.all_tenants().filter(tenant=tenant_a)
    raw_nanos = ledger.aggregate(n=Sum("cost_nanos"))["n"]
    raw_storage = StorageAccrual.objects.all_tenants().aggregate(n=Sum("cost_nanos"))["n"]
    assert (raw_nanos, raw_storage) == (40_321_400, 10_053_079)
    spent = nanos_to_micros(raw_nanos + raw_storage)
    assert spent == 50_374
    period.refresh_from_db()
    live = holds.budget_period_live(period_id=period.pk)
    assert period.spent_nanos == live["spent_nanos"] == raw_nanos + raw_storage
    assert period.spent_micros == live["spent"] == spent
    assert (period.reserved_micros, live["reserved"]) == (0, 0)
    for granularity in (Granularity.MINUTE, Granularity.DAY):
        rollups = UsageRollup.objects.all_tenants().filter(tenant=tenant_a, granularity=granularity)
        assert rollups.aggregate(n=Sum("cost_nanos"))["n"] == raw_nanos
        assert all(r.cost_micros == nanos_to_micros(r.cost_nanos) for r in rollups)
    summary = savings_summary(tenant=tenant_a, since=at - timedelta(hours=1), until=now)
    without = ledger.aggregate(n=Sum("cost_without_cache_nanos"))["n"]
    assert summary.spent_micros == spent
    assert summary.saved_micros == nanos_to_micros(without - raw_nanos - raw_storage)

    # The hot path enforces the recomputed figure: exactly the room left, not a µ$ more.
    assert _gateway_reserve(periods, hold_id="gw-last", amount=limit - spent) is None
    refusal = _gateway_reserve(periods, hold_id="gw-over", amount=1)
    assert refusal is not None and refusal.spent_micros == spent
    # Running it again changes nothing, in PostgreSQL or in Redis.
    with django_capture_on_commit_callbacks(execute=True):
        again = usage_reprice(actor=platform_actor, since=at - timedelta(hours=1))
    assert (again.rows_changed, again.budget_delta_nanos) == (0, 0)
    assert holds.budget_period_live(period_id=period.pk)["spent"] == spent
