"""Break-even against hand-computed cases, including the spec's and DOMAIN.md's examples."""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal

import pytest

from billing.errors import InvalidUsage, PriceNotFound
from billing.services.breakeven import blended_cost, breakeven

pytestmark = pytest.mark.django_db
D = Decimal


def test_the_specs_gemini_25_pro_example_breaks_even_at_four_hits_an_hour(price_book) -> None:
    # 100k tokens for 1 h: create $0.125, storage $0.45/h, hit $0.0125 vs $0.125 uncached.
    result = breakeven(
        provider="vertex",
        model="gemini-2.5-pro",
        context_tokens=100_000,
        queries_per_hour=D(10),
        ttl=timedelta(hours=1),
    )
    assert result.mode == "storage"
    assert result.create_cost_micros == 125_000
    assert result.storage_per_hour_micros == 450_000
    assert (result.hit_cost_micros, result.miss_cost_micros) == (12_500, 125_000)
    assert result.breakeven_queries_per_hour == D("4.0000")  # 0.45 / (0.125 - 0.0125)
    # Counting one creation per 1 h TTL: (0.45 + 0.125) / 0.1125 = 5.1111 hits/h.
    assert result.breakeven_queries_per_hour_incl_create == D("5.1111")
    # 10 queries/h: $1.25 without; $0.45 + 10 × $0.0125 + $0.125 = $0.70 with.
    assert result.hourly_cost_without_cache_micros == 1_250_000
    assert result.hourly_cost_with_cache_micros == 700_000
    assert result.hourly_saving_micros == 550_000


def test_below_break_even_the_cache_costs_more(price_book) -> None:
    result = breakeven(
        provider="vertex",
        model="gemini-2.5-pro",
        context_tokens=100_000,
        queries_per_hour=D(2),
        ttl=timedelta(hours=24),
    )
    # without: 2 × 0.125 = $0.25; with: 0.45 + 2 × 0.0125 + 0.125 / 24 = $0.480208
    assert result.hourly_cost_without_cache_micros == 250_000
    assert result.hourly_cost_with_cache_micros == 480_208
    assert result.hourly_saving_micros < 0


def test_a_context_over_200k_tokens_uses_the_long_tier(price_book) -> None:
    result = breakeven(
        provider="vertex",
        model="gemini-2.5-pro",
        context_tokens=300_000,
        queries_per_hour=D(1),
        ttl=timedelta(hours=1),
    )
    assert (result.miss_cost_micros, result.hit_cost_micros) == (750_000, 75_000)  # 2.50, 0.25
    assert result.breakeven_queries_per_hour == D("2.0000")  # 4.50 / (2.50 - 0.25)


def test_anthropic_write_premium_against_reads_with_a_sliding_ttl(price_book) -> None:
    result = breakeven(
        provider="anthropic",
        model="claude-sonnet-4-5",
        context_tokens=10_000,
        queries_per_hour=D(12),
        ttl=timedelta(minutes=5),
    )
    assert result.mode == "write_premium"
    assert result.create_cost_micros == 37_500  # 10k × $3.75 (5-minute write, 1.25×)
    # q* = ln((3.75 - 0.30) / (3.00 - 0.30)) / (1/12 h) = 12 ln(1.2778) = 2.9414
    expected = 12 * math.log(3.45 / 2.70)
    assert abs(float(result.breakeven_queries_per_hour) - expected) < 1e-4
    # 12 q/h, T = 1/12 h: p_miss = e^-1; per query 0.3679 × 37,500 + 0.6321 × 3,000
    p_miss = math.exp(-1)
    per_query = p_miss * 37_500 + (1 - p_miss) * 3_000
    assert abs(result.hourly_cost_with_cache_micros - 12 * per_query) <= 1
    assert result.hourly_cost_without_cache_micros == 12 * 30_000


def test_one_hour_writes_cost_twice_input(price_book) -> None:
    result = breakeven(
        provider="anthropic",
        model="claude-sonnet-4-5",
        context_tokens=10_000,
        queries_per_hour=D(1),
        ttl=timedelta(hours=1),
    )
    assert result.create_cost_micros == 60_000
    expected = math.log((6.00 - 0.30) / (3.00 - 0.30))  # T = 1 h
    assert abs(float(result.breakeven_queries_per_hour) - expected) < 1e-4


def test_without_a_write_premium_any_reuse_pays(price_book) -> None:
    result = breakeven(
        provider="openai",
        model="gpt-5",
        context_tokens=10_000,
        queries_per_hour=D(1),
        ttl=timedelta(minutes=10),
    )
    assert result.breakeven_queries_per_hour == 0
    assert result.hourly_cost_with_cache_micros <= result.hourly_cost_without_cache_micros


def test_domain_example_blends_to_084_and_2520_a_month_instead_of_9000(price_book) -> None:
    # 100M input tokens a day at $3.00/M, 80 % read from cache at $0.30/M.
    result = blended_cost(
        provider="anthropic",
        model="claude-sonnet-4-5",
        input_tokens_per_day=100_000_000,
        hit_ratio=D("0.8"),
        days=30,
    )
    assert result.blended_input_per_mtok == D("0.84")
    assert result.daily_cost_micros == 84_000_000  # $84 a day instead of $300
    assert result.daily_cost_without_cache_micros == 300_000_000
    assert result.period_cost_micros == 2_520_000_000  # $2,520
    assert result.period_cost_without_cache_micros == 9_000_000_000  # $9,000


def test_pool_break_even_weighs_kv_block_hours_against_skipped_prefill(pool_price) -> None:
    result = breakeven(
        provider="vllm",
        model="",
        pool="h100-a",
        context_tokens=16_000,
        queries_per_hour=D(5),
        ttl=timedelta(hours=1),
    )
    # prefill 16k tokens: 16,000 × 2.5e6 / (3,600 × 10,000) = 1,111.1 µ$ per miss;
    # holding 1,000 blocks an hour: 1,000 × $2.50 / 10,000 = 250,000 µ$.
    assert result.miss_cost_micros == 1_111 and result.hit_cost_micros == 0
    assert result.storage_per_hour_micros == 250_000
    assert result.breakeven_queries_per_hour > 200  # KV memory is dear next to prefill


def test_bad_inputs_are_refused(price_book) -> None:
    with pytest.raises(InvalidUsage):
        breakeven(
            provider="vertex",
            model="gemini-2.5-pro",
            context_tokens=0,
            queries_per_hour=D(1),
            ttl=timedelta(hours=1),
        )
    with pytest.raises(InvalidUsage):
        breakeven(
            provider="vertex",
            model="gemini-2.5-pro",
            context_tokens=1,
            queries_per_hour=D(-1),
            ttl=timedelta(hours=1),
        )
    with pytest.raises(PriceNotFound):
        breakeven(
            provider="vertex",
            model="nope",
            context_tokens=1,
            queries_per_hour=D(1),
            ttl=timedelta(hours=1),
        )
    with pytest.raises(InvalidUsage):
        blended_cost(
            provider="anthropic",
            model="claude-sonnet-4-5",
            input_tokens_per_day=1,
            hit_ratio=D("1.5"),
        )
