"""The minute and day rollups' µ$ columns are the rounding of their summed nanos (issue 23.3).

PostgreSQL's ``sum(bigint)`` is ``numeric``, where ``/`` divides exactly: a new bucket's
µ$ was computed as ``1.6 + 1`` for 1,600 n$ and stored as 3 µ$ (one half-even rounding
of the sum is 2). The nano columns were right; every µ$ figure derived from them must be
``nanos_to_micros(nanos)``, as the ledger rows and budget periods are.

Flash-Lite is $0.10 per 1M input tokens: one prompt token is exactly 100 n$.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from billing.models import UsageRollup
from billing.pricing import nanos_to_micros
from billing.services.reprice import rollup_delta_apply
from billing.services.usage import usage_flush, usage_record
from tests.billing.conftest import T0

pytestmark = pytest.mark.django_db
LITE = "gemini-2.5-flash-lite"


def _book(tenant, key: str, *, minute: int, prompt_tokens: int) -> None:
    usage_record(
        tenant=tenant,
        request_id=key,
        provider="vertex",
        model=LITE,
        occurred_at=T0 + timedelta(minutes=minute, seconds=5),
        prompt_tokens=prompt_tokens,
    )


def _minute(tenant, minute: int) -> UsageRollup:
    return UsageRollup.objects.get(
        tenant=tenant, granularity="minute", bucket=T0 + timedelta(minutes=minute), model=LITE
    )


def test_a_new_buckets_micro_dollars_are_the_rounding_of_its_summed_nanos(
    tenant_a, price_book, usage_queue
) -> None:
    # (minute, prompt tokens per row): each minute is a bucket the flush creates.
    shapes = {
        0: [16],  # 1,600 n$ → 2 µ$ (was 3)
        1: [25],  # 2,500 n$ → 2 µ$, half to even (was 3)
        2: [6, 9],  # 600 + 900 = 1,500 n$ → 2 µ$ (one rounding of the sum)
        3: [7],  # 700 n$ → 1 µ$
        4: [14],  # 1,400 n$ → 1 µ$
        5: [35],  # 3,500 n$ → 4 µ$, half to even
    }
    for minute, rows in shapes.items():
        for n, tokens in enumerate(rows):
            _book(tenant_a, f"r-{minute}-{n}", minute=minute, prompt_tokens=tokens)
    usage_flush()
    expected = {0: (1_600, 2), 1: (2_500, 2), 2: (1_500, 2), 3: (700, 1), 4: (1_400, 1)}
    expected[5] = (3_500, 4)
    for minute, (nanos, micros) in expected.items():
        rollup = _minute(tenant_a, minute)
        assert (rollup.cost_nanos, rollup.cost_micros) == (nanos, micros), minute
        # Without cache every prompt token is paid in full too: the same rounding.
        assert rollup.cost_without_cache_micros == micros, minute
    day = UsageRollup.objects.get(tenant=tenant_a, granularity="day", model=LITE)
    # 1,600 + 2,500 + 1,500 + 700 + 1,400 + 3,500 = 11,200 n$ → 11 µ$
    assert (day.cost_nanos, day.cost_micros) == (11_200, 11)


def test_a_later_flush_into_the_same_bucket_keeps_the_rounding_of_the_total(
    tenant_a, price_book, usage_queue
) -> None:
    _book(tenant_a, "first", minute=0, prompt_tokens=16)  # 1,600 n$
    usage_flush()
    _book(tenant_a, "second", minute=0, prompt_tokens=9)  # + 900 n$ = 2,500 n$
    usage_flush()
    rollup = _minute(tenant_a, 0)
    assert (rollup.cost_nanos, rollup.cost_micros) == (2_500, 2)


def test_every_rollup_micro_figure_equals_the_rounding_of_its_nanos(
    tenant_a, price_book, usage_queue
) -> None:
    # 1..120 tokens, one request per minute: every remainder class of 1,000 n$ in steps
    # of 100 n$, each in a bucket of its own and all summed in one day bucket.
    for tokens in range(1, 121):
        _book(tenant_a, f"t-{tokens}", minute=tokens, prompt_tokens=tokens)
    usage_flush()
    rollups = list(UsageRollup.objects.filter(tenant=tenant_a))
    assert len(rollups) == 121
    wrong = [
        (r.granularity, r.bucket, r.cost_nanos, r.cost_micros)
        for r in rollups
        if r.cost_micros != nanos_to_micros(r.cost_nanos)
        or r.cost_without_cache_micros != nanos_to_micros(r.cost_without_cache_nanos)
    ]
    assert wrong == []
    day = next(r for r in rollups if r.granularity == "day")
    # Σ 1..120 = 7,260 tokens × 100 n$ = 726,000 n$ = 726 µ$
    assert (day.cost_nanos, day.cost_micros) == (726_000, 726)


def test_a_reprice_delta_that_creates_a_bucket_stores_the_rounding_of_its_nanos(
    tenant_a, price_book
) -> None:
    """A delta into a bucket with no rollup yet (the rollup path reprice and estimate
    corrections share) stores its µ$ figure too, not 0."""
    at = T0 + timedelta(hours=3)
    rollup_delta_apply(
        tenant_id=str(tenant_a.pk),
        at=at,
        provider="vertex",
        model=LITE,
        nanos=1_600,
        without_nanos=2_500,
    )
    minute = UsageRollup.objects.get(tenant=tenant_a, granularity="minute", bucket=at)
    assert (minute.cost_nanos, minute.cost_micros) == (1_600, 2)
    assert (minute.cost_without_cache_nanos, minute.cost_without_cache_micros) == (2_500, 2)
    rollup_delta_apply(
        tenant_id=str(tenant_a.pk),
        at=at,
        provider="vertex",
        model=LITE,
        nanos=-1_100,
        without_nanos=0,
    )
    minute.refresh_from_db()
    assert (minute.cost_nanos, minute.cost_micros) == (500, 0)  # 0.5 µ$, half to even
