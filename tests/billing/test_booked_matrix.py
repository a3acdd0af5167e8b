"""The hand-priced matrix, booked (issue 23): every cost kind through its production entry
point, each shape's ledger rows, budget counters and REST figure checked to the n$.

Cost kinds and the entry point each shape drives:

- **batch usage rows**: a batch producer's ``usage_record_many`` (one Redis append), then
  the beat's flush (``usage_flush``, the body of ``usage_flush_task``);
- **cache creation**: ``caches.services.lifecycle.cache_create`` and the operation's task
  body ``operation_execute`` against the Vertex emulator (the SDK on the wire), whose
  write is booked after commit (``creation_book``), then the flush;
- **vLLM warm-ups and pin probes**: ``cache_create`` + ``operation_execute`` (warm-up) and
  the scheduler's pin (``cache_enqueue_due_refreshes`` + ``operation_execute``, the probe)
  against reference workers (real HTTP, real paged KV cache), then the flush;
- **storage as it accrues**: the beat's sweep ``cache_storage_accrue_recent(now=…)`` (the
  body of ``cache_storage_accrue_task``) over cache rows, and the scheduler's expiry
  ``cache_expire_due`` (the cache's final accrual).

Gateway requests are the providers' matrices (``tests/providers/test_*_matrix.py``: the
official SDKs through the real gateway, each row hand-priced); the guard at the end
counts them with the shapes here.

Every expected figure is literal arithmetic from the seeded price book (migrations
``billing.0002``/``0004``/``0005``/``0007``), never a call to the pricing code. A line is
``tokens × n$ per token``; n$ per token = $ per 1M × 1,000:

- gemini-2.5-pro: input 1,250 (above 200k prompt tokens: 2,500), cached 125 / 250,
  output and thinking 10,000 / 15,000; storage 4.50 $/M/h = 4,500 n$ per token-hour;
- gemini-2.5-flash: input 300, audio 1,000, cached 30, cached audio 100, output 2,500,
  storage 1,000 per token-hour; gemini-2.5-flash-lite: 100, audio 300, cached 10, cached
  audio 30, output 400, storage 1,000; gemini-3-flash-preview: 500, audio 1,000, cached
  50, output 3,000, storage 1,000; gemini-3-pro-preview and 3.1-pro-preview: 2,000 /
  4,000, cached 200 / 400, output 12,000 / 18,000, storage 4,500;
- claude-sonnet-4-5: 3,000, read 300, 5-minute write 3,750, 1-hour write 6,000, output
  15,000; above 200k input tokens 6,000 / 600 / 7,500 / 12,000 / 22,500;
  claude-haiku-4-5: 1,000 / 100 / 1,250 / 2,000 / 5,000;
- gpt-5: 1,250, cached 125, output 10,000; gpt-4o: 2,500, cached 1,250, output 10,000;
- deepseek-chat: miss 270, hit 70, output 1,100; deepseek-reasoner: 550 / 140 / 2,190;
  both 135 / 35 / 550 from 16:30 to 00:30 UTC (DeepSeek's published off-peak prices);
- the seeded vLLM pool ``default``: $2.50 per GPU-hour, 4,600 prefill and 1,500 decode
  tokens per GPU-second, 2,000 KV blocks of 16 tokens per GPU: prefill
  2.5e9 ÷ 16,560,000 n$ a token, decode 2.5e9 ÷ 5,400,000, a block-hour 1,250,000 n$.
  Test pools: ``matrix`` $3.60/GPU-h, 1,000 prefill and 100 decode tokens/s, 1,000
  blocks (prefill 1,000 n$ a token, decode 10,000, a block-hour 3,600,000) and ``dear``
  $9/GPU-h, 1,000 / 100 tokens/s (prefill 2,500, decode 25,000).
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing.models import BudgetPeriod, PoolPrice, StorageAccrual, UsageRecord, UsageRollup
from billing.pricing import nanos_to_micros
from billing.services import budget_create
from billing.services import budget_reservations as holds
from billing.services.usage import usage_flush, usage_message, usage_record_many
from tests.billing.ledger_support import ledger_nanos

pytestmark = pytest.mark.django_db
REF_MODEL = "test/ref-tiny"
_serial = itertools.count()


def month_start(now: datetime | None = None) -> datetime:
    moment = now or timezone.now()
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def when(day: int, clock: str) -> datetime:
    """``clock`` (HH:MM or HH:MM:SS, UTC) on day ``day`` after this month's first (0: the
    1st): every batch shape is in the current month, whose period REST shows."""
    parts = [int(p) for p in clock.split(":")] + [0]
    return month_start() + timedelta(days=day, hours=parts[0], minutes=parts[1], seconds=parts[2])


# --- The books: PostgreSQL, Redis, Σ ledger + Σ storage, REST -------------------------------


@dataclass
class Books:
    """One tenant's month budget, its periods loaded into Redis as the gateway loads them
    (before anything is booked, so the Redis counter must move by the booking itself)."""

    tenant: Any
    api: Any
    budget: Any = None
    periods: dict[datetime, BudgetPeriod] = field(default_factory=dict)

    def open(self, *instants: datetime) -> None:
        for at in (*instants, timezone.now()):
            for view in holds.budget_periods_load(
                tenant_id=str(self.tenant.pk), principal_id=None, at=at
            ):
                period = BudgetPeriod.objects.get(tenant=self.tenant, pk=view.id)
                self.periods[period.period_start] = period

    def check(self, expected: dict[datetime, int] | int) -> None:
        """Every period: PostgreSQL = Redis = Σ ledger + Σ storage (raw rows) = the
        expected n$ (per period start, or one total over all of them); REST shows the
        current period's exact figure; every rollup's µ$ is its nanos rounded once."""
        total = 0
        for start, period in self.periods.items():
            fresh = BudgetPeriod.objects.get(tenant=self.tenant, pk=period.pk)
            live = holds.budget_period_live(period_id=period.pk)["spent_nanos"]
            raw = ledger_nanos(fresh)
            assert fresh.spent_nanos == live == raw, (start, fresh.spent_nanos, live, raw)
            assert fresh.spent_micros == nanos_to_micros(fresh.spent_nanos)
            if isinstance(expected, dict):
                assert raw == expected.get(start, 0), (start, raw, expected)
            total += raw
        if isinstance(expected, int):
            assert total == expected, (total, expected)
        shown = self.api.get(f"/api/v1/tenants/{self.tenant.slug}/budgets").json()["results"]
        current = shown[0]["current_period"]
        now_period = self.periods[month_start()]
        fresh = BudgetPeriod.objects.get(tenant=self.tenant, pk=now_period.pk)
        assert (current["spent_nanos"], current["spent_micros"]) == (
            fresh.spent_nanos,
            nanos_to_micros(fresh.spent_nanos),
        )
        for rollup in UsageRollup.objects.filter(tenant=self.tenant):
            assert rollup.cost_micros == nanos_to_micros(rollup.cost_nanos), rollup.bucket


@pytest.fixture
def commits(django_capture_on_commit_callbacks):
    """Run a block's after-commit callbacks (the Redis mirror, the creation booking)."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def books(tenant_a, admin_a, actor, api, price_book, usage_queue):
    budget = budget_create(
        actor=actor, tenant=tenant_a, name="month", period="month", limit_micros=10**13
    )
    api.force_login(admin_a)
    return Books(tenant=tenant_a, api=api, budget=budget)


def test_the_seeded_rates_are_the_ones_this_matrix_prices_by_hand(price_book) -> None:
    """The literal rates above are the seeded book's (a reseed would fail here first)."""
    D = Decimal

    def line(provider: str, model: str) -> tuple[Any, ...]:
        p = price_book[(provider, model)]
        return (
            p.input_per_mtok,
            p.cached_input_per_mtok,
            p.output_per_mtok,
            p.storage_per_mtok_hour,
            p.long_input_per_mtok,
            p.audio_input_per_mtok,
        )

    assert line("vertex", "gemini-2.5-pro") == (
        D("1.25"),
        D("0.125"),
        D("10"),
        D("4.50"),
        D("2.50"),
        None,
    )
    assert line("vertex", "gemini-2.5-flash")[:4] == (D("0.30"), D("0.03"), D("2.50"), D("1.00"))
    assert line("vertex", "gemini-2.5-flash-lite")[5] == D("0.30")
    assert line("vertex", "gemini-3-flash-preview")[5] == D("1.00")
    assert line("vertex", "gemini-3.1-pro-preview")[:5] == (
        D("2"),
        D("0.20"),
        D("12"),
        D("4.50"),
        D("4"),
    )
    assert line("anthropic", "claude-sonnet-4-5")[:5] == (
        D("3.00"),
        D("0.30"),
        D("15.00"),
        D("0"),
        D("6.00"),
    )
    assert line("openai", "gpt-4o")[:3] == (D("2.50"), D("1.25"), D("10.00"))
    assert line("deepseek", "deepseek-chat")[:3] == (D("0.27"), D("0.07"), D("1.10"))
    reasoner = price_book[("deepseek", "deepseek-reasoner")]
    assert line("deepseek", "deepseek-reasoner")[:3] == (D("0.55"), D("0.14"), D("2.19"))
    assert reasoner.time_discounts == [
        {
            "start": "16:30",
            "end": "00:30",
            "percent": 75,
            "rates": {"input": "0.135", "cached_input": "0.035", "output": "0.550"},
        }
    ]
    default = PoolPrice.objects.filter(pool="default").latest("version")
    assert (
        default.gpu_hour_usd,
        default.prefill_tokens_per_gpu_second,
        default.decode_tokens_per_gpu_second,
        default.kv_blocks_per_gpu,
        default.kv_block_tokens,
    ) == (D("2.50"), D(4600), D(1500), 2000, 16)


@pytest.fixture
def pools(db) -> None:
    """The matrix's own pools (see the module docstring)."""
    for pool, usd, prefill, decode, blocks in (
        ("matrix", "3.60", 1_000, 100, 1_000),
        ("dear", "9.00", 1_000, 100, 1_000),
    ):
        PoolPrice.objects.create(
            pool=pool,
            version=1,
            effective_from=datetime(2026, 1, 1, tzinfo=UTC),
            gpu_hour_usd=Decimal(usd),
            prefill_tokens_per_gpu_second=Decimal(prefill),
            decode_tokens_per_gpu_second=Decimal(decode),
            kv_blocks_per_gpu=blocks,
            kv_block_tokens=16,
            source="booked matrix",
        )


# --- Batch usage rows ------------------------------------------------------------------------

PEAK, OFF = (1, "10:00"), (1, "20:00")


def row(provider: str, model: str, at: tuple[int, str] = PEAK, **counts: Any) -> dict[str, Any]:
    return {"provider": provider, "model": model, "at": at, **counts}


def pro(**counts: Any) -> dict[str, Any]:
    return row("vertex", "gemini-2.5-pro", **counts)


def flash(**counts: Any) -> dict[str, Any]:
    return row("vertex", "gemini-2.5-flash", **counts)


def lite(**counts: Any) -> dict[str, Any]:
    return row("vertex", "gemini-2.5-flash-lite", **counts)


def chat(at: tuple[int, str] = PEAK, **counts: Any) -> dict[str, Any]:
    return row("deepseek", "deepseek-chat", at, **counts)


def reasoner(at: tuple[int, str] = PEAK, **counts: Any) -> dict[str, Any]:
    return row("deepseek", "deepseek-reasoner", at, **counts)


def vllm(pool: str = "default", **counts: Any) -> dict[str, Any]:
    return row("vllm", REF_MODEL, pool=pool, **counts)


# name: (rows of one batch, the n$ of each row)
BATCH: dict[str, tuple[list[dict[str, Any]], list[int]]] = {
    # 10,000 × 1,250 + 500 × 10,000
    "pro-plain": ([pro(prompt_tokens=10_000, output_tokens=500)], [17_500_000]),
    # 10,000 × 1,250 + 90,000 × 125 + 1,000 × 10,000 = 12.5M + 11.25M + 10M
    "pro-cached-read": (
        [pro(prompt_tokens=100_000, cached_read_tokens=90_000, output_tokens=1_000)],
        [33_750_000],
    ),
    # 2,200 × 1,250 + 300 × 10,000 + 1,800 × 10,000 = 2.75M + 3M + 18M
    "pro-thinking": (
        [pro(prompt_tokens=2_200, output_tokens=300, thinking_tokens=1_800)],
        [23_750_000],
    ),
    # long tier: 250,000 × 2,500 + 3,000 × 15,000 = 625M + 45M
    "pro-long-tier-thinking": (
        [pro(prompt_tokens=250_000, output_tokens=1_000, thinking_tokens=2_000)],
        [670_000_000],
    ),
    "pro-exactly-200k-base-tier": ([pro(prompt_tokens=200_000)], [250_000_000]),  # × 1,250
    "pro-200001-long-tier": ([pro(prompt_tokens=200_001)], [500_002_500]),  # × 2,500
    # the tier counts cached tokens: 1 × 2,500 + 200,000 × 250
    "pro-long-tier-cached": (
        [pro(prompt_tokens=200_001, cached_read_tokens=200_000)],
        [50_002_500],
    ),
    # an upstream error after the prompt was processed: 8,000 × 1,250
    "pro-failed-after-prompt": (
        [pro(prompt_tokens=8_000, status="upstream_error")],
        [10_000_000],
    ),
    "pro-nothing-done": ([pro(prompt_tokens=0, status="upstream_error")], [0]),
    "pro-one-cached-token": ([pro(prompt_tokens=1, cached_read_tokens=1)], [125]),
    # 1,000 × 300 + 100 × 2,500
    "flash-plain": ([flash(prompt_tokens=1_000, output_tokens=100)], [550_000]),
    # 6,000 × 300 + 4,000 × 1,000 + 100 × 2,500 = 1.8M + 4M + 0.25M
    "flash-audio-uncached": (
        [flash(prompt_tokens=10_000, audio_prompt_tokens=4_000, output_tokens=100)],
        [6_050_000],
    ),
    # 2,000 × 300 + 5,000 × 30 + 3,000 × 100 = 600k + 150k + 300k
    "flash-audio-cached": (
        [
            flash(
                prompt_tokens=10_000,
                cached_read_tokens=8_000,
                audio_prompt_tokens=3_000,
                audio_cached_read_tokens=3_000,
            )
        ],
        [1_050_000],
    ),
    "flash-audio-output": ([flash(prompt_tokens=0, audio_output_tokens=100)], [250_000]),
    # 3,000 × 300 + 512 × 2,500 (a stream cut while thinking)
    "flash-thinking-only": (
        [flash(prompt_tokens=3_000, thinking_tokens=512, status="client_disconnect")],
        [2_180_000],
    ),
    "lite-five-tokens": ([lite(prompt_tokens=5)], [500]),
    "lite-three-tokens": ([lite(prompt_tokens=3)], [300]),  # 0.3 µ$: REST µ$ 0, n$ 300
    "lite-ten-in-one-out": ([lite(prompt_tokens=10, output_tokens=1)], [1_400]),
    "lite-sixteen-tokens": ([lite(prompt_tokens=16)], [1_600]),  # its rollup: 2 µ$, not 3
    # 1,000 × 300 (audio) + 50 × 400
    "lite-audio": (
        [lite(prompt_tokens=1_000, audio_prompt_tokens=1_000, output_tokens=50)],
        [320_000],
    ),
    # 1,000 five-token rows of 500 n$: 500,000 n$ = exactly 500 µ$
    "lite-thousand-tiny-rows": ([lite(prompt_tokens=5)] * 1_000, [500] * 1_000),
    # 3,000 × 500 + 2,000 × 1,000 + 200 × 3,000
    "gemini-3-flash-audio": (
        [
            row(
                "vertex",
                "gemini-3-flash-preview",
                prompt_tokens=5_000,
                audio_prompt_tokens=2_000,
                output_tokens=200,
            )
        ],
        [4_100_000],
    ),
    # 2,000 + 12,000,000... : 1,000 × 2,000 + 1,000 × 12,000
    "gemini-3-pro-plain": (
        [row("vertex", "gemini-3-pro-preview", prompt_tokens=1_000, output_tokens=1_000)],
        [14_000_000],
    ),
    # long tier: 200,000 × 4,000 + 100,000 × 400 + 1,000 × 18,000
    "gemini-3.1-pro-long-tier": (
        [
            row(
                "vertex",
                "gemini-3.1-pro-preview",
                prompt_tokens=300_000,
                cached_read_tokens=100_000,
                output_tokens=1_000,
            )
        ],
        [858_000_000],
    ),
    # 5,000 × 3,000 + 15,000 × 3,750 + 800 × 15,000
    "sonnet-5m-write": (
        [
            row(
                "anthropic",
                "claude-sonnet-4-5",
                prompt_tokens=20_000,
                cache_write_5m_tokens=15_000,
                output_tokens=800,
            )
        ],
        [83_250_000],
    ),
    # 5,000 × 3,000 + 15,000 × 6,000 + 800 × 15,000
    "sonnet-1h-write": (
        [
            row(
                "anthropic",
                "claude-sonnet-4-5",
                prompt_tokens=20_000,
                cache_write_1h_tokens=15_000,
                output_tokens=800,
            )
        ],
        [117_000_000],
    ),
    # above 200k: 250,000 × 6,000 + 1,000 × 22,500
    "sonnet-long-tier": (
        [row("anthropic", "claude-sonnet-4-5", prompt_tokens=250_000, output_tokens=1_000)],
        [1_522_500_000],
    ),
    # 50,000 × 6,000 + 250,000 × 600 + 2,000 × 22,500
    "sonnet-long-tier-reads": (
        [
            row(
                "anthropic",
                "claude-sonnet-4-5",
                prompt_tokens=300_000,
                cached_read_tokens=250_000,
                output_tokens=2_000,
            )
        ],
        [495_000_000],
    ),
    # 5,000 × 3,000 + 30,000 × 300 + 5,000 × 3,750 + 10,000 × 6,000 + 1,000 × 15,000
    "sonnet-every-line": (
        [
            row(
                "anthropic",
                "claude-sonnet-4-5",
                prompt_tokens=50_000,
                cached_read_tokens=30_000,
                cache_write_5m_tokens=5_000,
                cache_write_1h_tokens=10_000,
                output_tokens=1_000,
            )
        ],
        [117_750_000],
    ),
    # 904 × 1,000 + 4,096 × 100
    "haiku-read": (
        [row("anthropic", "claude-haiku-4-5", prompt_tokens=5_000, cached_read_tokens=4_096)],
        [1_313_600],
    ),
    # 4,096 × 1,250 + 10 × 5,000
    "haiku-5m-write": (
        [
            row(
                "anthropic",
                "claude-haiku-4-5",
                prompt_tokens=4_096,
                cache_write_5m_tokens=4_096,
                output_tokens=10,
            )
        ],
        [5_170_000],
    ),
    # 2,000 × 1,250 + 300 × 10,000
    "gpt5-plain": (
        [row("openai", "gpt-5", prompt_tokens=2_000, output_tokens=300)],
        [5_500_000],
    ),
    # 1,024 × 1,250 + 1,024 × 125
    "gpt5-cached-half": (
        [row("openai", "gpt-5", prompt_tokens=2_048, cached_read_tokens=1_024)],
        [1_408_000],
    ),
    # 1,024 × 2,500 + 1,024 × 1,250 + 100 × 10,000
    "gpt4o-cached-half": (
        [
            row(
                "openai",
                "gpt-4o",
                prompt_tokens=2_048,
                cached_read_tokens=1_024,
                output_tokens=100,
            )
        ],
        [4_840_000],
    ),
    # 3,600 × 270 + 6,400 × 70 + 500 × 1,100 = 972k + 448k + 550k
    "deepseek-chat-peak": (
        [chat(prompt_tokens=10_000, cached_read_tokens=6_400, output_tokens=500)],
        [1_970_000],
    ),
    # off-peak: 3,600 × 135 + 6,400 × 35 + 500 × 550 = 486k + 224k + 275k
    "deepseek-chat-off-peak": (
        [chat(OFF, prompt_tokens=10_000, cached_read_tokens=6_400, output_tokens=500)],
        [985_000],
    ),
    # 10,000 × 550 + 3,000 × 2,190 = 5.5M + 6.57M
    "deepseek-reasoner-peak": (
        [reasoner(prompt_tokens=10_000, output_tokens=1_000, thinking_tokens=2_000)],
        [12_070_000],
    ),
    # DeepSeek's published off-peak price, not 25 % of each rate (which gave 3,017,500):
    # 10,000 × 135 + 3,000 × 550 = 1.35M + 1.65M
    "deepseek-reasoner-off-peak": (
        [reasoner(OFF, prompt_tokens=10_000, output_tokens=1_000, thinking_tokens=2_000)],
        [3_000_000],
    ),
    "deepseek-reasoner-off-peak-hit": (  # 6,400 × 35
        [reasoner((1, "17:00"), prompt_tokens=6_400, cached_read_tokens=6_400)],
        [224_000],
    ),
    "deepseek-reasoner-window-start-inclusive": (  # 1,000 × 550 (2.19 × 25 % = 547,500)
        [reasoner((1, "16:30"), prompt_tokens=0, output_tokens=1_000)],
        [550_000],
    ),
    "deepseek-reasoner-window-wraps-midnight": (  # 1,000 × 135
        [reasoner((2, "00:29:59"), prompt_tokens=1_000)],
        [135_000],
    ),
    "deepseek-reasoner-window-end-exclusive": (  # 1,000 × 550
        [reasoner((2, "00:30"), prompt_tokens=1_000)],
        [550_000],
    ),
    # 16,560 × 2.5e9 ÷ 16,560,000 = 2,500,000 exactly
    "vllm-batch-prefill": ([vllm(prompt_tokens=16_560)], [2_500_000]),
    # 5,400 × 2.5e9 ÷ 5,400,000 = 2,500,000 exactly
    "vllm-batch-decode": ([vllm(prompt_tokens=0, output_tokens=5_400)], [2_500_000]),
    # (20,000 − 3,440) computed = 2,500,000; 1,500 × 2.5e9 ÷ 5.4e6 = 694,444.4 → 694,444
    "vllm-batch-prefix-hit": (
        [vllm(prompt_tokens=20_000, cached_read_tokens=3_440, output_tokens=1_500)],
        [3_194_444],
    ),
    # a pool without a price of its own is priced at the default: 414 × 2.5e9 ÷ 16.56e6
    "vllm-batch-unpriced-pool-at-default": (
        [vllm(pool="no-price-yet", prompt_tokens=414)],
        [62_500],
    ),
    # the matrix pool: 1,000 × 1,000 + 10 × 10,000
    "vllm-batch-own-pool": (
        [vllm(pool="matrix", prompt_tokens=1_000, output_tokens=10)],
        [1_100_000],
    ),
    # one batch of rows of four providers: the sum of their lines
    "mixed-batch": (
        [
            pro(prompt_tokens=10_000, output_tokens=500),
            lite(prompt_tokens=5),
            chat(OFF, prompt_tokens=1_000),
            vllm(prompt_tokens=414),
        ],
        [17_500_000, 500, 135_000, 62_500],
    ),
}


@pytest.mark.parametrize("shape", list(BATCH))
def test_every_batch_usage_shape_books_its_hand_priced_cost(shape, books, pools, commits) -> None:
    rows, costs = BATCH[shape]
    books.open(*(when(*r["at"]) for r in rows))
    messages = []
    keys = []
    for r in rows:
        key = f"batch-{shape}-{next(_serial)}"
        keys.append(key)
        counts = {k: v for k, v in r.items() if k not in ("provider", "model", "at")}
        messages.append(
            usage_message(
                tenant=books.tenant,
                request_id=key,
                provider=r["provider"],
                model=r["model"],
                occurred_at=when(*r["at"]),
                **counts,
            )
        )
    with commits():
        usage_record_many(messages)  # the batch producer: one append
        usage_flush()  # the beat's flush
    booked = dict(
        UsageRecord.objects.filter(tenant=books.tenant).values_list("request_id", "cost_nanos")
    )
    assert [booked[k] for k in keys] == costs
    expected: dict[datetime, int] = {}
    for r, cost in zip(rows, costs, strict=True):
        start = month_start(when(*r["at"]))
        expected[start] = expected.get(start, 0) + cost
    books.check(expected)


# --- Cache creation (Vertex) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def vertex_emulator() -> Iterator[str]:
    """One Vertex emulator for the module's creations (its base URL)."""
    from caches.providers.vertex_emulator.launcher import running_vertex_emulator

    with running_vertex_emulator() as (base_url, _emulator):
        yield base_url


@pytest.fixture
def vertex_matrix(vertex_emulator: str, settings: Any) -> Iterator[str]:
    """The control plane's Vertex provider pointed at the module's emulator."""
    from caches.providers.vertex import forget_clients

    settings.CACHEPLANE_VERTEX_BASE_URL = vertex_emulator
    settings.CACHEPLANE_VERTEX_STATIC_TOKEN = "test-token"
    settings.CACHEPLANE_VERTEX_PROJECT = "p1"
    settings.CACHEPLANE_VERTEX_LOCATION = "us-central1"
    settings.CACHEPLANE_PROVIDER_TIMEOUT_SECONDS = 30
    forget_clients()
    yield vertex_emulator
    forget_clients()


# name: (model, cached tokens, TTL seconds, n$). The emulator counts ceil(bytes / 4): a
# system instruction of 4 × N bytes is a cache of exactly N tokens. Vertex bills the
# write at the input price of the tier the cached tokens fall into.
CREATE: dict[str, tuple[str, int, int, int]] = {
    "pro-100k-1h": ("gemini-2.5-pro", 100_000, 3_600, 125_000_000),  # 100,000 × 1,250
    "pro-100001-1h": ("gemini-2.5-pro", 100_001, 3_600, 125_001_250),  # 100,001 × 1,250
    "pro-minimum-2048": ("gemini-2.5-pro", 2_048, 3_600, 2_560_000),  # 2,048 × 1,250
    "pro-5-minute-ttl": ("gemini-2.5-pro", 100_000, 300, 125_000_000),  # same write price
    "pro-one-minute-ttl": ("gemini-2.5-pro", 50_000, 60, 62_500_000),  # 50,000 × 1,250
    "pro-exactly-200k-base-tier": ("gemini-2.5-pro", 200_000, 3_600, 250_000_000),
    "pro-200001-long-tier": ("gemini-2.5-pro", 200_001, 3_600, 500_002_500),  # × 2,500
    "pro-250k-long-tier": ("gemini-2.5-pro", 250_000, 3_600, 625_000_000),  # × 2,500
    "flash-minimum-1024": ("gemini-2.5-flash", 1_024, 3_600, 307_200),  # 1,024 × 300
    "flash-32768-5-minutes": ("gemini-2.5-flash", 32_768, 300, 9_830_400),  # 32,768 × 300
    "flash-100k": ("gemini-2.5-flash", 100_000, 7_200, 30_000_000),  # 100,000 × 300
    "lite-minimum-2048": ("gemini-2.5-flash-lite", 2_048, 3_600, 204_800),  # 2,048 × 100
    "lite-50k": ("gemini-2.5-flash-lite", 50_000, 3_600, 5_000_000),  # 50,000 × 100
    "gemini-3-flash-minimum-4096": ("gemini-3-flash-preview", 4_096, 3_600, 2_048_000),
    "gemini-3-flash-100k": ("gemini-3-flash-preview", 100_000, 600, 50_000_000),  # × 500
    "gemini-3.1-pro-1024": ("gemini-3.1-pro-preview", 1_024, 3_600, 2_048_000),  # × 2,000
    "gemini-3.1-pro-250k-long": ("gemini-3.1-pro-preview", 250_000, 3_600, 1_000_000_000),
}


@pytest.mark.parametrize("shape", list(CREATE))
def test_every_cache_creation_shape_books_its_hand_priced_write(
    shape, books, admin_a, vertex_matrix, commits
) -> None:
    from caches.models import CacheObject
    from caches.services import lifecycle
    from caches.services.execution import operation_execute
    from tests.factories import actor_for

    model, tokens, ttl, cost = CREATE[shape]
    books.open()
    outcome = lifecycle.cache_create(
        tenant=books.tenant,
        actor=actor_for(admin_a),
        spec=lifecycle.CacheSpec(
            name=shape,
            provider="vertex",
            model=model,
            content={"system_instruction": "abcd" * tokens},
            ttl_seconds=ttl,
        ),
    )
    with commits():
        assert operation_execute(operation_id=str(outcome.operation.pk)) == "succeeded"
    with commits():
        usage_flush()
    cache = CacheObject.objects.get(tenant=books.tenant, pk=outcome.operation.cache_id)
    assert cache.token_count == tokens  # the emulator's count is the hand count
    rows = list(UsageRecord.objects.filter(tenant=books.tenant))
    assert [(r.kind, r.cache_id, r.prompt_tokens, r.cost_nanos) for r in rows] == [
        ("cache_create", str(cache.pk), tokens, cost)
    ]
    assert rows[0].cost_without_cache_nanos == 0  # creation saves nothing
    books.check({month_start(): cost})


# --- vLLM warm-ups and pin probes (reference workers) -------------------------------------


@pytest.fixture(scope="module")
def ref_engines():
    """Two reference workers (real HTTP, a real paged KV cache with prefix caching and
    prompt-token details; the model's 1,024 positions bound a prompt): each shape registers
    them under the pool it prices."""
    from tests.workers.engine.support import tiny_config
    from workers.engine.launcher import serve

    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                serve(
                    tiny_config(
                        num_blocks=1_024, max_model_len=1_024, enable_prompt_tokens_details=True
                    )
                )
            )
            for _ in range(2)
        ]


@contextlib.contextmanager
def registered(engines, pool: str) -> Iterator[None]:
    from workers.models import Worker

    for n, engine in enumerate(engines):
        Worker.objects.create(
            name=f"m{n}", base_url=engine.base_url, model=REF_MODEL, block_size=16, pool=pool
        )
    yield


# The warm-up is one chat request per replica (``max_tokens`` 1) whose system message is
# the rendered prefix: "<system>\n" + S + "\n</system>" + "\n" (len(S) + 20 bytes). The
# reference model's tokenizer is byte-level, its chat template
# "<|bos|><|system|>\n{prefix}<|eos|>\n<|assistant|>\n": BOS 1 + 11 + (len(S) + 20) + EOS 1
# + 1 + 14 = len(S) + 48 prompt tokens P, one generated token. A warm-up computes all P
# (a fresh salt: nothing cached); a pin probe right after finds the prefix's full blocks
# but the last token resident, (P − 1) // 16 × 16, and computes the rest.
# name: (pool, P, replicas, probes, n$ of each ledger row in booking order)
PREFILL: dict[str, tuple[str, int, int, int, list[int]]] = {
    # matrix pool: 1,000 × 1,000 + 1 × 10,000
    "warm-1000-matrix": ("matrix", 1_000, 1, 0, [1_010_000]),
    "warm-500-matrix": ("matrix", 500, 1, 0, [510_000]),  # 500,000 + 10,000
    "warm-200-matrix": ("matrix", 200, 1, 0, [210_000]),  # 200,000 + 10,000
    "warm-1000-two-replicas": ("matrix", 1_000, 2, 0, [1_010_000, 1_010_000]),
    # probe: (999 // 16) × 16 = 992 resident, 8 computed: 8,000 + 10,000
    "warm-and-probe-1000": ("matrix", 1_000, 1, 1, [1_010_000, 18_000]),
    "warm-and-two-probes-1000": ("matrix", 1_000, 1, 2, [1_010_000, 18_000, 18_000]),
    # P = 1,001: warm 1,001,000 + 10,000; probe 1,000 // 16 × 16 = 992, 9 computed
    "warm-and-probe-1001": ("matrix", 1_001, 1, 1, [1_011_000, 19_000]),
    # P = 1,008: 1,007 // 16 × 16 = 992, 16 computed: 16,000 + 10,000
    "warm-and-probe-1008": ("matrix", 1_008, 1, 1, [1_018_000, 26_000]),
    # two replicas, each warmed then probed
    "warm-and-probe-two-replicas": (
        "matrix",
        1_000,
        2,
        1,
        [1_010_000, 1_010_000, 18_000, 18_000],
    ),
    # dear pool: 1,000 × 2,500 + 25,000
    "warm-1000-dear": ("dear", 1_000, 1, 0, [2_525_000]),
    # the seeded default pool: 828 × 2.5e9 ÷ 16,560,000 = 125,000 exactly; one decode
    # token 2.5e9 ÷ 5,400,000 = 462.96 → 463
    "warm-828-default": ("default", 828, 1, 0, [125_463]),
    "warm-414-default": ("default", 414, 1, 0, [62_963]),  # 62,500 exactly + 463
    # probe: 827 // 16 × 16 = 816 resident, 12 computed: 12 × 150.966 = 1,811.6 → 1,812
    "warm-and-probe-828-default": ("default", 828, 1, 1, [125_463, 2_275]),
    # a pool without a price of its own: the default's
    "warm-828-unpriced-pool": ("no-price-yet", 828, 1, 0, [125_463]),
}


@pytest.mark.parametrize("shape", list(PREFILL))
def test_every_vllm_warm_up_and_probe_shape_books_its_hand_priced_prefill(
    shape, books, admin_a, pools, ref_engines, commits
) -> None:
    from caches.models import CacheObject, CacheOperation, OperationKind
    from caches.services import lifecycle
    from caches.services.execution import operation_execute
    from caches.services.scheduling import cache_enqueue_due_refreshes
    from tests.factories import actor_for

    pool, prompt, replicas, probes, costs = PREFILL[shape]
    books.open()
    with registered(ref_engines, pool):
        outcome = lifecycle.cache_create(
            tenant=books.tenant,
            actor=actor_for(admin_a),
            spec=lifecycle.CacheSpec(
                name=shape,
                provider="vllm",
                model=REF_MODEL,
                content={"system_instruction": "q" * (prompt - 48)},
                ttl_seconds=3_600,
                replication_factor=replicas,
            ),
        )
        with commits():
            assert operation_execute(operation_id=str(outcome.operation.pk)) == "succeeded"
        cache = CacheObject.objects.get(tenant=books.tenant, pk=outcome.operation.cache_id)
        assert cache.token_count == prompt  # the worker's count is the hand count
        for _ in range(probes):
            CacheObject.objects.filter(tenant=books.tenant, pk=cache.pk).update(
                next_refresh_at=timezone.now()
            )
            assert cache_enqueue_due_refreshes() == 1
            op = CacheOperation.objects.get(
                tenant=books.tenant, cache=cache, kind=OperationKind.REFRESH, status="pending"
            )
            with commits():
                assert operation_execute(operation_id=str(op.pk)) == "succeeded"
    with commits():
        usage_flush()
    rows = list(UsageRecord.objects.filter(tenant=books.tenant).order_by("id"))
    warms = [r for r in rows if r.request_id.startswith("cache-warm:")]
    probe_rows = [r for r in rows if r.request_id.startswith("cache-probe:")]
    assert (len(warms), len(probe_rows)) == (replicas, replicas * probes)
    assert {(r.kind, r.provider, r.pool, r.cache_id) for r in rows} == {
        ("cache_create", "vllm", pool, str(cache.pk))
    }
    assert [r.cost_nanos for r in warms + probe_rows] == costs
    assert all(r.prompt_tokens == prompt and r.output_tokens == 1 for r in warms)
    books.check({month_start(): sum(costs)})


# --- Storage as it accrues -------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """One cache row: its provider/model/pool and token count, when it went live, and when
    it expires or ended (minutes after the shape's base instant)."""

    model: str
    tokens: int
    live_at: float
    expires_at: float = 24 * 60
    ended_at: float | None = None
    provider: str = "vertex"
    pool: str = ""


PRO, FLASH, LITE = "gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"


def kv(tokens: int, live_at: float, pool: str = "default", **more: Any) -> Held:
    return Held(REF_MODEL, tokens, live_at, provider="vllm", pool=pool, **more)


# name: (base instant, caches, sweeps (minutes after base; a pair (minutes, tokens) sets
# the first cache's token count first), n$ per (hour bucket, minutes after base)).
# Base "day" = day 2 10:00 (a clock hour); "month" = this month's first instant.
STORAGE: dict[str, tuple[str, list[Held], list[Any], dict[int, int]]] = {
    # 100,000 × 4,500 × 0.5 h
    "pro-100k-30-minutes": ("day", [Held(PRO, 100_000, 0)], [30], {0: 225_000_000}),
    # across two clock hours: 30 min then 60 min of 450,000,000 n$ an hour
    "pro-100k-90-minutes-two-hours": (
        "day",
        [Held(PRO, 100_000, 30)],
        [120],
        {0: 225_000_000, 60: 450_000_000},
    ),
    # 32,768 × 1,000 × 1 h
    "flash-32768-one-hour": ("day", [Held(FLASH, 32_768, 0)], [60], {0: 32_768_000}),
    # 2,048 × 1,000 ÷ 6 = 341,333.3 → 341,333
    "lite-2048-ten-minutes": ("day", [Held(LITE, 2_048, 0)], [10], {0: 341_333}),
    # 4,096 × 1,000 × 0.75 h
    "gemini-3-flash-45-minutes": (
        "day",
        [Held("gemini-3-flash-preview", 4_096, 0)],
        [45],
        {0: 3_072_000},
    ),
    # above 200k the storage rate stays 4.50 (no long storage rate): 250,000 × 4,500 ÷ 3
    "gemini-3.1-pro-250k-20-minutes": (
        "day",
        [Held("gemini-3.1-pro-preview", 250_000, 0)],
        [20],
        {0: 375_000_000},
    ),
    "pro-250k-one-hour": ("day", [Held(PRO, 250_000, 0)], [60], {0: 1_125_000_000}),
    # 5,000 × 1,000 ÷ 3,600 = 1,388.9 → 1,389
    "flash-5000-one-second": ("day", [Held(FLASH, 5_000, 0)], [1 / 60], {0: 1_389}),
    # 1,000,000 × 1,000 ÷ 3,600 = 277,777.8 → 277,778
    "flash-1m-one-second": ("day", [Held(FLASH, 1_000_000, 0)], [1 / 60], {0: 277_778}),
    # last month's hour and this month's: 450,000,000 each
    "pro-across-the-month-boundary": (
        "month",
        [Held(PRO, 100_000, -60)],
        [60],
        {-60: 450_000_000, 0: 450_000_000},
    ),
    # 30 s each side at 125,000 n$ a second
    "pro-month-boundary-seconds": (
        "month",
        [Held(PRO, 100_000, -0.5)],
        [0.5],
        {-60: 3_750_000, 0: 3_750_000},
    ),
    # 3,600 × 1,000 an hour, an hour each side
    "flash-across-the-month-boundary": (
        "month",
        [Held(FLASH, 3_600, -60)],
        [60],
        {-60: 3_600_000, 0: 3_600_000},
    ),
    # it expired 20 minutes in; the sweep at 50 minutes books up to the expiry:
    # 100,000 × 4,500 ÷ 3 (to the sweep's time it would be 375,000,000)
    "pro-expired-before-the-sweep": (
        "day",
        [Held(PRO, 100_000, 0, expires_at=20)],
        [50],
        {0: 150_000_000},
    ),
    # expiring on the hour: nothing in the next hour (30 min × 450,000,000 an hour)
    "pro-expired-on-the-hour": (
        "day",
        [Held(PRO, 100_000, 30, expires_at=60)],
        [75],
        {0: 225_000_000},
    ),
    # evicted after 10 minutes, an hour before its expiry: 450,000,000 ÷ 6
    "pro-evicted-before-expiry": (
        "day",
        [Held(PRO, 100_000, 0, expires_at=60, ended_at=10)],
        [30],
        {0: 75_000_000},
    ),
    # 100k for 30 min, then 200k for the rest of the hour: 225,000,000 + 450,000,000
    "pro-token-count-grows-mid-hour": (
        "day",
        [Held(PRO, 100_000, 0)],
        [30, (60, 200_000)],
        {0: 675_000_000},
    ),
    # reported three times (overlapping): each second once, 40 min
    "pro-swept-three-times": ("day", [Held(PRO, 100_000, 0)], [20, 40, 40], {0: 300_000_000}),
    # 63 blocks × 0.5 h × 1,250,000
    "vllm-1000-tokens-default-pool": ("day", [kv(1_000, 0)], [30], {0: 39_375_000}),
    "vllm-one-block-hour": ("day", [kv(16, 0)], [60], {0: 1_250_000}),
    "vllm-17-tokens-two-blocks": ("day", [kv(17, 0)], [60], {0: 2_500_000}),
    # 10 blocks × 3,600,000 an hour: 30 min then 60 min
    "vllm-own-pool-two-hours": (
        "day",
        [kv(160, 30, pool="matrix")],
        [120],
        {0: 18_000_000, 60: 36_000_000},
    ),
    "vllm-unpriced-pool-at-default": (
        "day",
        [kv(1_000, 0, pool="no-price-yet")],
        [30],
        {0: 39_375_000},
    ),
    # two caches: 225,000,000 + 100,000 × 1,000 × 0.5 h
    "two-caches-one-sweep": (
        "day",
        [Held(PRO, 100_000, 0), Held(FLASH, 100_000, 0)],
        [30],
        {0: 275_000_000},
    ),
    # the sweep's 2-hour lookback: a cache live 5 h, swept once at 5 h, is charged from
    # hour_floor(5 h − 2 h) = 3 h: 2 × 450,000,000 (earlier sweeps charged the rest)
    "pro-lookback-window": (
        "day",
        [Held(PRO, 100_000, 0)],
        [300],
        {180: 450_000_000, 240: 450_000_000},
    ),
}


def _base(name: str) -> datetime:
    return month_start() if name == "month" else when(2, "10:00")


@pytest.mark.parametrize("shape", list(STORAGE))
def test_every_storage_shape_books_its_hand_priced_accrual(shape, books, pools, commits) -> None:
    from caches.models import CacheObject, CacheState
    from caches.services.storage import cache_storage_accrue_recent

    base_name, caches, sweeps, by_hour = STORAGE[shape]
    base = _base(base_name)

    def at(minutes: float) -> datetime:
        return base + timedelta(seconds=round(minutes * 60))

    books.open(*(at(m) for m in by_hour))
    rows = []
    for n, held in enumerate(caches):
        ended = held.ended_at is not None
        rows.append(
            CacheObject.objects.create(
                tenant=books.tenant,
                name=f"{shape}-{n}",
                provider=held.provider,
                model=held.model,
                pool=held.pool,
                content={"system_instruction": shape},
                content_digest=uuid.uuid4().hex,
                token_count=held.tokens,
                ttl_seconds=3_600,
                state=CacheState.EVICTED if ended else CacheState.ACTIVE,
                activated_at=at(held.live_at),
                expire_at=at(held.expires_at),
                ended_at=None if held.ended_at is None else at(held.ended_at),
            )
        )
    for sweep in sweeps:
        minutes = sweep
        if isinstance(sweep, tuple):
            minutes, tokens = sweep
            CacheObject.objects.filter(tenant=books.tenant, pk=rows[0].pk).update(
                token_count=tokens
            )
        with commits():
            cache_storage_accrue_recent(now=at(minutes))
    accrued: dict[datetime, int] = {}
    for a in StorageAccrual.objects.filter(tenant=books.tenant):
        accrued[a.hour] = accrued.get(a.hour, 0) + a.cost_nanos
    assert accrued == {at(m): n for m, n in by_hour.items()}
    expected: dict[datetime, int] = {}
    for m, n in by_hour.items():
        start = month_start(at(m))
        expected[start] = expected.get(start, 0) + n
    books.check(expected)


def test_a_cache_the_sweeper_expires_is_booked_to_its_expiry_not_the_sweepers_time(
    books, commits
) -> None:
    """The scheduler's expiry (``cache_expire_due``, the beat) ends the cache and books its
    final accrual, to the second it expired, then settles its storage hold."""
    from billing.models import BudgetReservation
    from billing.services import budget_reserve
    from caches.models import CacheObject, CacheState
    from caches.services.scheduling import cache_expire_due

    now = timezone.now().replace(microsecond=0)
    live_at, expire_at = now - timedelta(minutes=50), now - timedelta(minutes=20)
    books.open(live_at, expire_at)
    cache_id = uuid.uuid4()
    hold = budget_reserve(  # what the cache's creation reserved for its storage
        tenant=books.tenant,
        principal=None,
        estimate_micros=450_000,
        request_id=f"cache:{cache_id}",
        kind="cache_storage",
    )
    assert hold is not None
    cache = CacheObject.objects.create(
        id=cache_id,
        tenant=books.tenant,
        name="expires",
        provider="vertex",
        model=PRO,
        content={"system_instruction": "expires"},
        content_digest=uuid.uuid4().hex,
        token_count=100_000,
        ttl_seconds=1_800,
        state=CacheState.ACTIVE,
        activated_at=live_at,
        expire_at=expire_at,
        budget_reservation_id=hold.pk,
    )
    with commits():
        assert cache_expire_due() == 1  # the sweeper runs 20 minutes after the expiry
    cache.refresh_from_db()
    assert cache.state == CacheState.EXPIRED
    assert cache.ended_at is not None and cache.ended_at >= now
    accruals = list(StorageAccrual.objects.filter(tenant=books.tenant).order_by("hour"))
    assert max(a.covered_to for a in accruals) == expire_at
    # 30 minutes × 450,000,000 n$ an hour (to the sweeper's time it would be 50 minutes)
    assert sum(a.cost_nanos for a in accruals) == 225_000_000
    assert BudgetReservation.objects.get(tenant=books.tenant, pk=hold.pk).state == "settled"
    books.check(225_000_000)


# --- The guard -------------------------------------------------------------------------------


def gateway_shapes() -> int:
    """Gateway requests hand-priced through the real gateway (the providers' matrices)."""
    from tests.providers import test_anthropic_matrix, test_deepseek_matrix, test_openai_matrix

    return sum(
        len(m.SHAPES) for m in (test_anthropic_matrix, test_deepseek_matrix, test_openai_matrix)
    )


def test_the_matrix_covers_every_cost_kind_with_at_least_100_shapes() -> None:
    kinds = {
        "gateway requests": gateway_shapes(),
        "batch usage rows": len(BATCH),
        "cache creation": len(CREATE),
        "vLLM warm-ups and probes": len(PREFILL),
        "storage as it accrues": len(STORAGE) + 1,  # + the sweeper's expiry
    }
    assert all(count >= 10 for count in kinds.values()), kinds
    booked_here = sum(count for kind, count in kinds.items() if kind != "gateway requests")
    assert booked_here >= 100, kinds
    assert sum(kinds.values()) >= 190, kinds
