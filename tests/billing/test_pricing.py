"""Exact costs for every usage shape, against hand computation (micro-USD = tokens × $/M)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.pricing import (
    PoolRates,
    TokenRates,
    UsageCounts,
    gpu_cost,
    line_nanos,
    nanos_to_micros,
    round_micros,
    storage_nanos,
    token_cost,
)

D = Decimal
PRO = TokenRates(  # gemini-2.5-pro as seeded
    input=D("1.25"),
    cached_input=D("0.125"),
    cache_write_5m=D("1.25"),
    cache_write_1h=D("1.25"),
    output=D("10"),
    storage_per_hour=D("4.50"),
    long_threshold=200_000,
    long_input=D("2.50"),
    long_cached_input=D("0.25"),
    long_cache_write_5m=D("2.50"),
    long_cache_write_1h=D("2.50"),
    long_output=D("15"),
)
SONNET = TokenRates(  # claude-sonnet-4-5 as seeded: 3.00 base, 1.25x / 2x / 0.1x
    input=D("3.00"),
    cached_input=D("0.30"),
    cache_write_5m=D("3.75"),
    cache_write_1h=D("6.00"),
    output=D("15.00"),
)
POOL = PoolRates(
    gpu_hour_usd=D("2.50"),
    prefill_tokens_per_gpu_second=D(10_000),
    decode_tokens_per_gpu_second=D(1_000),
    kv_blocks_per_gpu=10_000,
    kv_block_tokens=16,
)


def test_a_plain_request_costs_input_plus_output() -> None:
    cost = token_cost(UsageCounts(prompt_tokens=10_000, output_tokens=500), PRO)
    # 10,000 × $1.25/M = 12,500 µ$ = 12,500,000 n$; 500 × $10/M = 5,000 µ$.
    assert cost.lines["input"] == 12_500_000 and cost.lines["output"] == 5_000_000
    assert cost.micros == 17_500 and cost.without_cache_micros == 17_500
    assert cost.saved_micros == 0


def test_a_cached_read_is_billed_at_the_cached_rate_and_saving_is_exact() -> None:
    counts = UsageCounts(prompt_tokens=100_000, cached_read_tokens=90_000, output_tokens=1_000)
    cost = token_cost(counts, PRO)
    # 10,000 × 1.25 + 90,000 × 0.125 + 1,000 × 10 = 12,500 + 11,250 + 10,000
    assert cost.micros == 33_750
    assert cost.without_cache_micros == 125_000 + 10_000
    assert cost.saved_micros == 101_250


def test_five_minute_cache_writes_cost_one_and_a_quarter_times_input() -> None:
    counts = UsageCounts(prompt_tokens=20_000, cache_write_5m_tokens=15_000, output_tokens=800)
    cost = token_cost(counts, SONNET)
    # 5,000 × 3 + 15,000 × 3.75 + 800 × 15 = 15,000 + 56,250 + 12,000
    assert cost.micros == 83_250
    assert cost.without_cache_micros == 60_000 + 12_000
    assert cost.saved_micros == -11_250  # a write costs more than it saves on its own request


def test_one_hour_cache_writes_cost_twice_input() -> None:
    counts = UsageCounts(prompt_tokens=20_000, cache_write_1h_tokens=15_000, output_tokens=800)
    assert token_cost(counts, SONNET).micros == 15_000 + 90_000 + 12_000


def test_a_request_with_reads_and_both_writes_sums_its_line_items() -> None:
    counts = UsageCounts(
        prompt_tokens=50_000,
        cached_read_tokens=30_000,
        cache_write_5m_tokens=5_000,
        cache_write_1h_tokens=10_000,
        output_tokens=1_000,
    )
    cost = token_cost(counts, SONNET)
    lines = {k: v for k, v in cost.lines.items() if v}
    assert lines == {  # nano-USD
        "input": 15_000_000,  # 5,000 uncached × 3
        "cached_read": 9_000_000,  # 30,000 × 0.30
        "cache_write_5m": 18_750_000,  # 5,000 × 3.75
        "cache_write_1h": 60_000_000,  # 10,000 × 6
        "output": 15_000_000,  # 1,000 × 15
    }
    assert cost.micros == 117_750


def test_a_prompt_over_200k_tokens_prices_the_whole_request_at_the_long_tier() -> None:
    counts = UsageCounts(prompt_tokens=250_000, cached_read_tokens=200_000, output_tokens=2_000)
    cost = token_cost(counts, PRO)
    # 50,000 × 2.50 + 200,000 × 0.25 + 2,000 × 15
    assert cost.micros == 125_000 + 50_000 + 30_000
    assert cost.without_cache_micros == 625_000 + 30_000


def test_exactly_200k_tokens_stays_in_the_base_tier() -> None:
    cost = token_cost(UsageCounts(prompt_tokens=200_000), PRO)
    assert cost.micros == 250_000


def test_rounding_is_half_even_once_on_the_total() -> None:
    half = D("0.5")
    assert [nanos_to_micros(line_nanos(n, half)) for n in (1, 3, 5, 7)] == [0, 2, 2, 4]
    assert round_micros(D("2.5")) == 2 and round_micros(D("3.5")) == 4
    rates = TokenRates(
        input=half, cached_input=half, cache_write_5m=half, cache_write_1h=half, output=half
    )
    # Three lines of 0.5 µ$ are booked exactly (500 n$ each): the total is 1,500 n$ and
    # its µ$ figure is round(1.5) = 2, the price of the sum (per-line rounding gave 0).
    counts = UsageCounts(prompt_tokens=2, cached_read_tokens=1, output_tokens=1)
    assert token_cost(counts, rates).nanos == 1_500
    assert token_cost(counts, rates).micros == 2


def test_sub_micro_amounts_are_exact_decimals_not_floats() -> None:
    # 0.1 + 0.2 style errors cannot happen: 3 tokens × $0.1/M is exactly 0.3 µ$.
    assert line_nanos(3, D("0.1")) == 300
    assert nanos_to_micros(line_nanos(30, D("0.1"))) == 3
    assert nanos_to_micros(line_nanos(1_000_000_000, D("0.000001"))) == 1_000


def test_a_failed_upstream_request_costs_exactly_what_the_provider_reported() -> None:
    # Nothing billed upstream: the gateway reports zero counts, the ledger books 0.
    assert token_cost(UsageCounts(), PRO).micros == 0
    # Prompt billed, no output (e.g. an error after the provider processed the prompt).
    assert token_cost(UsageCounts(prompt_tokens=8_000), PRO).micros == 10_000


def test_impossible_counts_are_reported() -> None:
    assert UsageCounts(prompt_tokens=10, cached_read_tokens=11).problems()
    assert UsageCounts(prompt_tokens=-1).problems()
    assert (
        UsageCounts(prompt_tokens=10, cached_read_tokens=5, cache_write_5m_tokens=5).problems()
        == []
    )


def test_gpu_chargeback_charges_computed_prefill_and_decode() -> None:
    counts = UsageCounts(prompt_tokens=8_000, cached_read_tokens=6_000, output_tokens=100)
    cost = gpu_cost(counts, POOL)
    # prefill 2,000 tokens: 2,000 × $2.50 × 1e9 / (3,600 × 10,000) = 138,888.9 → 138,889 n$
    # decode 100 tokens: 100 × 2.5e9 / (3,600 × 1,000) = 69,444.4 → 69,444 n$
    assert cost.lines == {"prefill": 138_889, "decode": 69_444}
    # without the prefix cache every prompt token is prefilled: 555,555.6 → 555,556 n$;
    # 555,556 + 69,444 = 625,000 n$ = 625 µ$
    assert cost.without_cache_micros == 625


def test_kv_block_hours_are_charged_by_whole_blocks() -> None:
    # 1,000 tokens = 62.5 → 63 blocks of 16; half an hour = 31.5 block-hours;
    # 31.5 × $2.50 / 10,000 blocks per GPU = $0.007875 = 7,875 µ$.
    assert POOL.blocks_for(1_000) == 63
    assert POOL.kv_nanos(tokens=1_000, seconds=D(1800)) == 7_875_000


def test_storage_is_prorated_by_the_second() -> None:
    # 100k tokens × $4.50/M/h for 90 minutes = $0.675
    nanos = storage_nanos(tokens=100_000, seconds=D(5400), rate_per_mtok_hour=D("4.50"))
    assert nanos == 675_000_000


@pytest.mark.parametrize("tokens", [0, 1, 199_999, 200_001, 1_000_000])
def test_cost_never_exceeds_the_same_request_at_full_price_when_only_reading(tokens) -> None:
    counts = UsageCounts(prompt_tokens=tokens, cached_read_tokens=tokens // 2)
    cost = token_cost(counts, PRO)
    assert 0 <= cost.micros <= cost.without_cache_micros
