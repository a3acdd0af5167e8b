"""The usage-shape matrix: every figure computed by hand from published prices, exactly.

Each case is a literal nano-USD amount with the arithmetic beside it. Units: a line costs
``tokens × $/M × 1000`` n$ (1 µ$ = 1,000 n$). Published prices used (USD per 1M tokens):

- gemini-2.5-pro: input 1.25 / >200k 2.50, cached 0.125 / 0.25, output (thinking
  included) 10 / 15, storage 4.50 per hour (spec §4);
- gemini-2.5-flash: input 0.30, audio 1.00, cached 0.03, cached audio 0.10, output 2.50,
  storage 1.00; gemini-2.5-flash-lite: 0.10, audio 0.30, cached 0.01 / 0.03, output 0.40;
- claude-sonnet-4-5: 3.00 / write 5m 3.75 / 1h 6.00 / read 0.30 / output 15; above 200k
  input tokens 6.00 / 7.50 / 12.00 / 0.60 / 22.50; claude-haiku-4-5: 1 / 1.25 / 2 / 0.10 / 5;
- deepseek-chat: miss 0.27, hit 0.07, output 1.10; deepseek-reasoner: 0.55 / 0.14 / 2.19;
  from 16:30 to 00:30 UTC both at DeepSeek's published off-peak prices 0.135 / 0.035 /
  0.550 (for the reasoner that is 75.45 % / 75 % / 74.89 % off, not 75 % of each rate),
  as the seeded book has them (migration ``billing.0007``);
- gpt-5: 1.25 / cached 0.125 / output 10;
- a GPU pool at $2.50 per GPU-hour, 10k prefill and 1k decode tokens per GPU-second,
  10k KV blocks of 16 tokens per GPU.

These are the pricing functions' shapes; every cost kind booked through its production
entry point (ledger rows, budget counters, REST) is ``tests/billing/test_booked_matrix.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from billing.pricing import (
    DiscountWindow,
    PoolRates,
    TokenRates,
    UsageCounts,
    cache_creation_cost,
    gpu_cost,
    nanos_to_micros,
    request_cost_upper_bound,
    storage_nanos,
    token_cost,
)

D = Decimal
PRO = TokenRates(
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
FLASH = TokenRates(
    input=D("0.30"),
    cached_input=D("0.03"),
    cache_write_5m=D("0.30"),
    cache_write_1h=D("0.30"),
    output=D("2.50"),
    storage_per_hour=D("1.00"),
    audio_input=D("1.00"),
    audio_cached_input=D("0.10"),
)
LITE = TokenRates(
    input=D("0.10"),
    cached_input=D("0.01"),
    cache_write_5m=D("0.10"),
    cache_write_1h=D("0.10"),
    output=D("0.40"),
    storage_per_hour=D("1.00"),
    audio_input=D("0.30"),
    audio_cached_input=D("0.03"),
)
SONNET = TokenRates(
    input=D("3.00"),
    cached_input=D("0.30"),
    cache_write_5m=D("3.75"),
    cache_write_1h=D("6.00"),
    output=D("15.00"),
    long_threshold=200_000,
    long_input=D("6.00"),
    long_cached_input=D("0.60"),
    long_cache_write_5m=D("7.50"),
    long_cache_write_1h=D("12.00"),
    long_output=D("22.50"),
)
HAIKU = TokenRates(
    input=D("1.00"),
    cached_input=D("0.10"),
    cache_write_5m=D("1.25"),
    cache_write_1h=D("2.00"),
    output=D("5.00"),
)
# DeepSeek's off-peak window as published and seeded (billing.0007): its own price per line.
OFF_PEAK = (
    DiscountWindow.parse(
        {
            "start": "16:30",
            "end": "00:30",
            "rates": {"input": "0.135", "cached_input": "0.035", "output": "0.550"},
        }
    ),
)
DS_CHAT = TokenRates(
    input=D("0.27"),
    cached_input=D("0.07"),
    cache_write_5m=D("0.27"),
    cache_write_1h=D("0.27"),
    output=D("1.10"),
    discounts=OFF_PEAK,
)
DS_REASONER = TokenRates(
    input=D("0.55"),
    cached_input=D("0.14"),
    cache_write_5m=D("0.55"),
    cache_write_1h=D("0.55"),
    output=D("2.19"),
    discounts=OFF_PEAK,
)
GPT5 = TokenRates(
    input=D("1.25"),
    cached_input=D("0.125"),
    cache_write_5m=D("1.25"),
    cache_write_1h=D("1.25"),
    output=D("10.00"),
)
POOL = PoolRates(
    gpu_hour_usd=D("2.50"),
    prefill_tokens_per_gpu_second=D(10_000),
    decode_tokens_per_gpu_second=D(1_000),
    kv_blocks_per_gpu=10_000,
)
TINY = TokenRates(  # one millionth of a dollar per 1M tokens: 0.001 n$ per token
    input=D("0.000001"),
    cached_input=D("0"),
    cache_write_5m=D("0"),
    cache_write_1h=D("0"),
    output=D("0"),
)
PEAK = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def at(hh: int, mm: int, ss: int = 0) -> datetime:
    return datetime(2026, 3, 2, hh, mm, ss, tzinfo=UTC)


def C(**counts: int) -> UsageCounts:
    return UsageCounts(**counts)


def req(counts: UsageCounts, rates: TokenRates, when: datetime | None = None) -> Callable:
    return lambda: token_cost(counts, rates, when).nanos


CASES: list[tuple[str, Callable[[], int], int]] = [
    # --- Gemini 2.5 Pro: text, cache reads, thinking, tiers, huge and failed requests ---
    ("pro-plain", req(C(prompt_tokens=10_000, output_tokens=500), PRO), 17_500_000),
    # 10,000×1.25×1000 + 500×10×1000 = 12,500,000 + 5,000,000
    (
        "pro-cached-read",
        req(C(prompt_tokens=100_000, cached_read_tokens=90_000, output_tokens=1_000), PRO),
        33_750_000,
    ),
    # 10,000×1,250 + 90,000×125 + 1,000×10,000 = 12.5M + 11.25M + 10M
    (
        "pro-thinking-1800",
        req(C(prompt_tokens=2_200, output_tokens=300, thinking_tokens=1_800), PRO),
        23_750_000,
    ),
    # 2,200×1,250 + 300×10,000 + 1,800×10,000 = 2.75M + 3M + 18M (the 23,750 µ$)
    (
        "pro-thinking-long-tier",
        req(C(prompt_tokens=250_000, output_tokens=1_000, thinking_tokens=2_000), PRO),
        670_000_000,
    ),
    # 250,000×2,500 + 3,000×15,000 = 625M + 45M
    ("pro-exactly-200k-base-tier", req(C(prompt_tokens=200_000), PRO), 250_000_000),
    # 200,000×1,250
    ("pro-200001-long-tier", req(C(prompt_tokens=200_001), PRO), 500_002_500),
    # 200,001×2,500
    (
        "pro-long-tier-counts-cached-tokens",
        req(C(prompt_tokens=200_001, cached_read_tokens=200_000), PRO),
        50_002_500,
    ),
    # 1×2,500 + 200,000×250
    (
        "pro-long-thinking-one-token",
        req(C(prompt_tokens=200_001, thinking_tokens=1), PRO),
        500_017_500,
    ),
    # 200,001×2,500 + 1×15,000
    ("pro-1e9-prompt-tokens", req(C(prompt_tokens=10**9), PRO), 2_500_000_000_000),
    # 10^9×2,500 (long tier) = $2,500
    (
        "pro-1e9-output-tokens",
        req(C(prompt_tokens=1_000, output_tokens=10**9), PRO),
        10_000_001_250_000,
    ),
    # 1,000×1,250 + 10^9×10,000 = 1.25M + 10^13
    ("pro-one-cached-token", req(C(prompt_tokens=1, cached_read_tokens=1), PRO), 125),
    ("pro-one-thinking-token", req(C(thinking_tokens=1), PRO), 10_000),
    ("pro-failed-after-prompt", req(C(prompt_tokens=8_000), PRO), 10_000_000),
    # upstream error after the prompt was processed: 8,000×1,250
    ("pro-failed-before-anything", req(C(), PRO), 0),
    (
        "pro-aborted-stream-37-tokens",
        req(C(prompt_tokens=5_000, cached_read_tokens=4_000, output_tokens=37), PRO),
        2_120_000,
    ),
    # 1,000×1,250 + 4,000×125 + 37×10,000 = 1.25M + 0.5M + 0.37M
    (
        "pro-disconnect-during-thinking",
        req(C(prompt_tokens=40_000, thinking_tokens=700), PRO),
        57_000_000,
    ),
    # 40,000×1,250 + 700×10,000 = 50M + 7M
    # --- Gemini Flash / Flash-Lite: many tiny requests, audio (modality rates) ---
    ("lite-five-tokens", req(C(prompt_tokens=5), LITE), 500),
    # 5×0.10×1000
    ("lite-one-token", req(C(prompt_tokens=1), LITE), 100),
    ("lite-three-tokens", req(C(prompt_tokens=3), LITE), 300),
    ("lite-ten-in-one-out", req(C(prompt_tokens=10, output_tokens=1), LITE), 1_400),
    # 10×100 + 1×400
    ("lite-seven-output", req(C(output_tokens=7), LITE), 2_800),
    (
        "lite-ten-thousand-five-token-requests",
        lambda: sum(token_cost(C(prompt_tokens=5), LITE).nanos for _ in range(10_000)),
        5_000_000,
    ),
    # 10,000 × 500 n$ = 5,000,000 n$ = 5,000 µ$ (whole-µ$ rounding per request gave 0)
    (
        "lite-audio-prompt",
        req(C(prompt_tokens=1_000, audio_prompt_tokens=1_000, output_tokens=50), LITE),
        320_000,
    ),
    # 1,000×0.30×1000 + 50×400
    (
        "lite-audio-all-cached",
        req(
            C(
                prompt_tokens=2_000,
                cached_read_tokens=2_000,
                audio_prompt_tokens=2_000,
                audio_cached_read_tokens=2_000,
            ),
            LITE,
        ),
        60_000,
    ),
    # 2,000×0.03×1000
    (
        "flash-audio-uncached",
        req(C(prompt_tokens=10_000, audio_prompt_tokens=4_000, output_tokens=100), FLASH),
        6_050_000,
    ),
    # 6,000×300 + 4,000×1,000 + 100×2,500 = 1.8M + 4M + 0.25M
    (
        "flash-audio-cached",
        req(
            C(
                prompt_tokens=10_000,
                cached_read_tokens=8_000,
                audio_prompt_tokens=3_000,
                audio_cached_read_tokens=3_000,
            ),
            FLASH,
        ),
        1_050_000,
    ),
    # 2,000×300 + 5,000×30 + 3,000×100 = 600k + 150k + 300k
    ("flash-audio-output-at-output-rate", req(C(audio_output_tokens=100), FLASH), 250_000),
    ("flash-one-cached-token", req(C(prompt_tokens=1, cached_read_tokens=1), FLASH), 30),
    (
        "flash-aborted-stream-thinking-only",
        req(C(prompt_tokens=3_000, thinking_tokens=512), FLASH),
        2_180_000,
    ),
    # 3,000×300 + 512×2,500 = 900k + 1.28M
    # --- Claude Sonnet 4.5: writes, reads, the >200k tier ---
    (
        "sonnet-250k-uncached-long-tier",
        req(C(prompt_tokens=250_000, output_tokens=1_000), SONNET),
        1_522_500_000,
    ),
    # 250,000×6,000 + 1,000×22,500 = 1.5G + 22.5M (the 1,522,500 µ$)
    (
        "sonnet-exactly-200k-base",
        req(C(prompt_tokens=200_000, output_tokens=1_000), SONNET),
        615_000_000,
    ),
    # 200,000×3,000 + 1,000×15,000
    (
        "sonnet-long-with-reads",
        req(C(prompt_tokens=300_000, cached_read_tokens=250_000, output_tokens=2_000), SONNET),
        495_000_000,
    ),
    # 50,000×6,000 + 250,000×600 + 2,000×22,500 = 300M + 150M + 45M
    (
        "sonnet-long-5m-write",
        req(C(prompt_tokens=210_000, cache_write_5m_tokens=200_000), SONNET),
        1_560_000_000,
    ),
    # 10,000×6,000 + 200,000×7,500
    (
        "sonnet-long-1h-write",
        req(C(prompt_tokens=220_000, cache_write_1h_tokens=210_000), SONNET),
        2_580_000_000,
    ),
    # 10,000×6,000 + 210,000×12,000
    (
        "sonnet-5m-write",
        req(C(prompt_tokens=20_000, cache_write_5m_tokens=15_000, output_tokens=800), SONNET),
        83_250_000,
    ),
    # 5,000×3,000 + 15,000×3,750 + 800×15,000
    (
        "sonnet-1h-write",
        req(C(prompt_tokens=20_000, cache_write_1h_tokens=15_000, output_tokens=800), SONNET),
        117_000_000,
    ),
    # 5,000×3,000 + 15,000×6,000 + 800×15,000
    (
        "sonnet-every-line",
        req(
            C(
                prompt_tokens=50_000,
                cached_read_tokens=30_000,
                cache_write_5m_tokens=5_000,
                cache_write_1h_tokens=10_000,
                output_tokens=1_000,
            ),
            SONNET,
        ),
        117_750_000,
    ),
    # 5,000×3,000 + 30,000×300 + 5,000×3,750 + 10,000×6,000 + 1,000×15,000
    (
        "sonnet-199999-base",
        req(C(prompt_tokens=199_999, cached_read_tokens=150_000), SONNET),
        194_997_000,
    ),
    # 49,999×3,000 + 150,000×300
    # --- Claude Haiku 4.5 ---
    (
        "haiku-5m-write-min-prefix",
        req(C(prompt_tokens=4_096, cache_write_5m_tokens=4_096, output_tokens=10), HAIKU),
        5_170_000,
    ),
    # 4,096×1,250 + 10×5,000
    (
        "haiku-1h-write",
        req(C(prompt_tokens=4_096, cache_write_1h_tokens=4_096), HAIKU),
        8_192_000,
    ),
    ("haiku-read", req(C(prompt_tokens=5_000, cached_read_tokens=4_096), HAIKU), 1_313_600),
    # 904×1,000 + 4,096×100
    # --- DeepSeek: hit/miss prices and the off-peak window ---
    (
        "deepseek-chat-peak",
        req(C(prompt_tokens=10_000, cached_read_tokens=6_400, output_tokens=500), DS_CHAT, PEAK),
        1_970_000,
    ),
    # 3,600×270 + 6,400×70 + 500×1,100 = 972k + 448k + 550k
    (
        "deepseek-chat-off-peak",
        req(
            C(prompt_tokens=10_000, cached_read_tokens=6_400, output_tokens=500),
            DS_CHAT,
            at(17, 0),
        ),
        985_000,
    ),
    # 3,600 × 135 + 6,400 × 35 + 500 × 550 = 486k + 224k + 275k (half of 1,970,000)
    (
        "deepseek-chat-window-start-inclusive",
        req(
            C(prompt_tokens=10_000, cached_read_tokens=6_400, output_tokens=500),
            DS_CHAT,
            at(16, 30),
        ),
        985_000,
    ),
    (
        "deepseek-chat-window-wraps-midnight",
        req(
            C(prompt_tokens=10_000, cached_read_tokens=6_400, output_tokens=500),
            DS_CHAT,
            at(0, 29, 59),
        ),
        985_000,
    ),
    (
        "deepseek-chat-window-end-exclusive",
        req(
            C(prompt_tokens=10_000, cached_read_tokens=6_400, output_tokens=500),
            DS_CHAT,
            at(0, 30),
        ),
        1_970_000,
    ),
    (
        "deepseek-chat-just-before-midnight",
        req(C(prompt_tokens=1_000), DS_CHAT, at(23, 59)),
        135_000,
    ),
    # 1,000 × 135
    (
        "deepseek-reasoner-peak",
        req(C(prompt_tokens=10_000, output_tokens=1_000, thinking_tokens=2_000), DS_REASONER, PEAK),
        12_070_000,
    ),
    # 10,000×550 + 3,000×2,190 = 5.5M + 6.57M
    (
        "deepseek-reasoner-off-peak-published",
        req(
            C(prompt_tokens=10_000, output_tokens=1_000, thinking_tokens=2_000),
            DS_REASONER,
            at(20, 0),
        ),
        3_000_000,
    ),
    # 10,000 × 135 + 3,000 × 550 = 1.35M + 1.65M (25 % of 12,070,000 would be 3,017,500)
    # --- OpenAI ---
    ("gpt5-plain", req(C(prompt_tokens=2_000, output_tokens=300), GPT5), 5_500_000),
    (
        "gpt5-cached-half",
        req(C(prompt_tokens=2_048, cached_read_tokens=1_024), GPT5),
        1_408_000,
    ),
    # 1,024×1,250 + 1,024×125
    # --- Sub-nano rounding: half-even, once per line ---
    ("tiny-500-tokens-half-to-even", req(C(prompt_tokens=500), TINY), 0),
    # 500 × 0.001 n$ = 0.5 → 0
    ("tiny-1500-tokens-half-to-even", req(C(prompt_tokens=1_500), TINY), 2),
    # 1.5 → 2
    # --- Self-hosted pool (GPU-hour chargeback) ---
    (
        "pool-partial-prefix-hit",
        lambda: (
            gpu_cost(
                C(prompt_tokens=8_000, cached_read_tokens=6_000, output_tokens=100), POOL
            ).nanos
        ),
        208_333,
    ),
    # prefill 2,000×2.5e9/(3,600×10,000) = 138,888.9 → 138,889; decode 100×2.5e9/3.6e6 =
    # 69,444.4 → 69,444
    (
        "pool-thinking-is-decoded",
        lambda: (
            gpu_cost(C(prompt_tokens=1_000, output_tokens=100, thinking_tokens=900), POOL).nanos
        ),
        763_888,
    ),
    # prefill 1,000 → 69,444.4 → 69,444; decode 1,000×2.5e9/3.6e6 = 694,444.4 → 694,444
    (
        "pool-36k-prefill-exact",
        lambda: gpu_cost(C(prompt_tokens=36_000), POOL).nanos,
        2_500_000,
    ),
    # 36,000×2.5e9/3.6e7 = 2,500,000 (one GPU-second's worth × 3.6)
    # --- Storage lifetimes ---
    (
        "storage-pro-100k-90-minutes",
        lambda: storage_nanos(tokens=100_000, seconds=D(5_400), rate_per_mtok_hour=D("4.50")),
        675_000_000,
    ),
    # 100,000 × 4.50 × 1.5 h × 1000
    (
        "storage-flash-5k-one-second",
        lambda: storage_nanos(tokens=5_000, seconds=D(1), rate_per_mtok_hour=D("1.00")),
        1_389,
    ),
    # 5,000 × 1.00 / 3,600 × 1000 = 1,388.9 → 1,389
    (
        "storage-pro-500k-one-hour",
        lambda: storage_nanos(tokens=500_000, seconds=D(3_600), rate_per_mtok_hour=D("4.50")),
        2_250_000_000,
    ),
    (
        "storage-flash-1m-one-second",
        lambda: storage_nanos(tokens=1_000_000, seconds=D(1), rate_per_mtok_hour=D("1.00")),
        277_778,
    ),
    # 1,000,000 × 1.00 / 3,600 × 1000 = 277,777.8 → 277,778
    (
        "storage-flash-200k-one-day",
        lambda: storage_nanos(tokens=200_000, seconds=D(86_400), rate_per_mtok_hour=D("1.00")),
        4_800_000_000,
    ),
    # 200,000 × 1.00 × 24 × 1000
    (
        "storage-pool-1000-tokens-half-hour",
        lambda: POOL.kv_nanos(tokens=1_000, seconds=D(1_800)),
        7_875_000,
    ),
    # 63 blocks × 0.5 h × $2.50 / 10,000 = $0.007875
    ("storage-pool-one-block-hour", lambda: POOL.kv_nanos(tokens=16, seconds=D(3_600)), 250_000),
    (
        "storage-pool-17-tokens-two-blocks",
        lambda: POOL.kv_nanos(tokens=17, seconds=D(3_600)),
        500_000,
    ),
    # --- Cache creation (Vertex bills the write at the input price) ---
    (
        "create-pro-100k-1h",
        lambda: cache_creation_cost(tokens=100_000, rates=PRO, ttl_seconds=3_600).nanos,
        125_000_000,
    ),
    # 100,000 × 1,250
    (
        "create-pro-250k-long-tier",
        lambda: cache_creation_cost(tokens=250_000, rates=PRO, ttl_seconds=3_600).nanos,
        625_000_000,
    ),
    # 250,000 × 2,500
    (
        "create-flash-32768-5m",
        lambda: cache_creation_cost(tokens=32_768, rates=FLASH, ttl_seconds=300).nanos,
        9_830_400,
    ),
    # 32,768 × 300
    (
        "create-saves-nothing",
        lambda: (
            cache_creation_cost(tokens=100_000, rates=PRO, ttl_seconds=3_600).without_cache_nanos
        ),
        0,
    ),
    # --- Reservation upper bounds ---
    (
        "bound-pro-cache-tokens-and-model-max-output",
        lambda: (
            request_cost_upper_bound(
                rates=PRO, prompt_tokens=1_000, cache_tokens=100_000, max_output_tokens=65_536
            ).nanos
        ),
        781_610_000,
    ),
    # 101,000 × 1,250 + 65,536 × 10,000 = 126.25M + 655.36M
    (
        "bound-crosses-the-long-tier-with-the-cache",
        lambda: (
            request_cost_upper_bound(
                rates=PRO, prompt_tokens=150_000, cache_tokens=100_000, max_output_tokens=8_192
            ).nanos
        ),
        747_880_000,
    ),
    # 250,000 × 2,500 + 8,192 × 15,000 = 625M + 122.88M
    (
        "bound-sonnet-dearest-input-is-the-1h-write",
        lambda: (
            request_cost_upper_bound(
                rates=SONNET, prompt_tokens=1_000, max_output_tokens=1_000
            ).nanos
        ),
        21_000_000,
    ),
    # 1,000 × 6,000 + 1,000 × 15,000
]


@pytest.mark.parametrize(("shape", "compute", "expected"), CASES, ids=[c[0] for c in CASES])
def test_every_usage_shape_costs_exactly_the_hand_computed_price(shape, compute, expected) -> None:
    assert compute() == expected


def test_the_matrix_has_at_least_sixty_shapes() -> None:
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


def test_the_micro_figure_is_the_rounded_price_of_the_sum() -> None:
    # 10,000 five-token Flash-Lite requests: 5,000,000 n$ → exactly 5,000 µ$.
    total = sum(token_cost(C(prompt_tokens=5), LITE).nanos for _ in range(10_000))
    assert nanos_to_micros(total) == 5_000
    # 1,500 n$ is 1.5 µ$: half-even → 2; 2,500 n$ → 2; 2,501 n$ → 3.
    assert [nanos_to_micros(n) for n in (1_500, 2_500, 2_501)] == [2, 2, 3]


def test_a_reservation_bound_is_never_below_the_request_it_bounds() -> None:
    counts = C(prompt_tokens=101_000, cached_read_tokens=100_000, output_tokens=8_000)
    actual = token_cost(counts, PRO).nanos
    bound = request_cost_upper_bound(
        rates=PRO, prompt_tokens=1_000, cache_tokens=100_000, max_output_tokens=8_000
    ).nanos
    # actual: 1,000×1,250 + 100,000×125 + 8,000×10,000 = 1.25M + 12.5M + 80M
    assert actual == 93_750_000 and bound >= actual


DEEPSEEK_OFF_PEAK = [
    # (shape, counts, when, expected n$): off-peak is DeepSeek's published per-line price
    # (0.135 / 0.035 / 0.550), not 25 % of each peak rate (0.1375 / 0.035 / 0.5475).
    ("reasoner-off-peak-miss", C(prompt_tokens=10_000), at(20, 0), 1_350_000),
    # 10,000 × 135
    ("reasoner-off-peak-hit", C(prompt_tokens=6_400, cached_read_tokens=6_400), at(17, 0), 224_000),
    # 6,400 × 35
    ("reasoner-off-peak-output", C(output_tokens=1_000), at(23, 0), 550_000),
    # 1,000 × 550 (25 % of 2.19 would be 547,500)
    (
        "reasoner-off-peak-thinking-at-output",
        C(prompt_tokens=10_000, output_tokens=1_000, thinking_tokens=2_000),
        at(20, 0),
        3_000_000,
    ),
    # 10,000 × 135 + 3,000 × 550 = 1.35M + 1.65M (75 % of each rate gave 3,017,500)
    (
        "reasoner-peak-unchanged",
        C(prompt_tokens=10_000, output_tokens=1_000, thinking_tokens=2_000),
        PEAK,
        12_070_000,
    ),
    # 10,000 × 550 + 3,000 × 2,190
    ("reasoner-window-end-exclusive", C(prompt_tokens=1_000), at(0, 30), 550_000),
    # 1,000 × 550 (peak again at 00:30)
]


@pytest.mark.parametrize(
    ("shape", "counts", "when", "expected"),
    DEEPSEEK_OFF_PEAK,
    ids=[c[0] for c in DEEPSEEK_OFF_PEAK],
)
def test_deepseek_off_peak_is_the_published_per_line_price(shape, counts, when, expected) -> None:
    assert token_cost(counts, DS_REASONER, when).nanos == expected


def test_a_window_with_rates_must_name_every_line() -> None:
    with pytest.raises(ValueError, match="rates must name each"):
        DiscountWindow.parse({"start": "16:30", "end": "00:30", "rates": {"input": "0.1"}})


@pytest.mark.django_db
def test_a_restored_price_book_keeps_deepseeks_published_off_peak_prices() -> None:
    """Transactional tests flush the tables and restore the seeded book: the DeepSeek
    windows come back as migration 0007 left them, not as 0004's 75 % off every rate."""
    from billing.models import ModelPrice
    from tests.billing.ledger_support import price_book_restore

    ModelPrice.objects.update(superseded_by=None)  # as a flush leaves it: no rows at all
    ModelPrice.objects.all().delete()
    price_book_restore()
    for model in ("deepseek-chat", "deepseek-reasoner"):
        (window,) = ModelPrice.objects.get(provider="deepseek", model=model).time_discounts
        assert window["rates"] == {"input": "0.135", "cached_input": "0.035", "output": "0.550"}
