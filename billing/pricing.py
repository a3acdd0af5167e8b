"""Cost arithmetic: exact, integer micro-USD, no Django.

Money is an ``int`` of micro-USD (1 USD = 1_000_000). Rates are ``Decimal`` USD per one
million tokens (the unit providers publish, at most 6 decimal places), so the cost of a
line item in micro-USD is simply ``tokens × rate``: ``tokens × (rate USD / 1e6 tokens) ×
1e6 micro-USD/USD``. Each line item is computed as an exact rational number (rates scaled
to integers, no intermediate rounding, no floats) and rounded **once**, half-even, to whole
micro-USD; a request's cost is the sum of its rounded line items.

Usage counts follow one convention whatever the provider reports:
``prompt_tokens`` is every input token of the request, *including* cached reads and cache
writes; ``cached_read_tokens``, ``cache_write_5m_tokens`` and ``cache_write_1h_tokens``
are subsets of it; the rest is plain (uncached) input. (Anthropic reports
``input_tokens`` without the cache tokens: the gateway adds them before recording.)
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from functools import cached_property

ZERO = Decimal(0)
SECONDS_PER_HOUR = Decimal(3600)
MICROS_PER_USD = 1_000_000
SCALE = 10**6  # rates carry at most 6 decimal places


def round_micros(value: Decimal) -> int:
    """Round an exact micro-USD amount half-even to an integer (done once per line item)."""
    return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))


def div_half_even(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded half-even, exactly (non-negative numerator)."""
    quotient, remainder = divmod(numerator, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2):
        quotient += 1
    return quotient


def scaled(rate: Decimal) -> int:
    """``rate × 10^6`` as an exact integer (rates have at most 6 decimal places)."""
    value = rate.scaleb(6)
    if value != value.to_integral_value():
        raise ValueError(f"rate {rate} has more than 6 decimal places")
    return int(value)


def line_micros(tokens: int, rate_per_mtok: Decimal) -> int:
    """Cost of ``tokens`` at ``rate_per_mtok`` USD per 1M tokens, in micro-USD."""
    return div_half_even(tokens * scaled(rate_per_mtok), SCALE)


def usd_to_micros(usd: Decimal) -> int:
    return round_micros(usd * MICROS_PER_USD)


@dataclass(frozen=True)
class TokenRates:
    """Per-token prices of one model version (USD per 1M tokens).

    ``long_*`` apply to the whole request when its prompt exceeds ``long_threshold``
    tokens (Gemini's >200k tier is chosen per request by prompt size).
    """

    input: Decimal
    cached_input: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    output: Decimal
    storage_per_hour: Decimal = ZERO
    long_threshold: int | None = None
    long_input: Decimal | None = None
    long_cached_input: Decimal | None = None
    long_cache_write_5m: Decimal | None = None
    long_cache_write_1h: Decimal | None = None
    long_output: Decimal | None = None

    @cached_property
    def scaled(self) -> tuple[int, int, int, int, int]:
        """(input, cached, write 5m, write 1h, output) × 10^6 as integers (hot path)."""
        return (
            scaled(self.input),
            scaled(self.cached_input),
            scaled(self.cache_write_5m),
            scaled(self.cache_write_1h),
            scaled(self.output),
        )

    @cached_property
    def long_rates(self) -> TokenRates:
        return TokenRates(
            input=_or(self.long_input, self.input),
            cached_input=_or(self.long_cached_input, self.cached_input),
            cache_write_5m=_or(self.long_cache_write_5m, self.cache_write_5m),
            cache_write_1h=_or(self.long_cache_write_1h, self.cache_write_1h),
            output=_or(self.long_output, self.output),
            storage_per_hour=self.storage_per_hour,
        )

    def for_prompt(self, prompt_tokens: int) -> TokenRates:
        """The rates that apply to a request with this many prompt tokens."""
        if self.long_threshold is None or prompt_tokens <= self.long_threshold:
            return self
        return self.long_rates


def _or(value: Decimal | None, fallback: Decimal) -> Decimal:
    return fallback if value is None else value


@dataclass(frozen=True)
class PoolRates:
    """A self-hosted worker pool's GPU price and throughput assumptions.

    A GPU-second costs ``gpu_hour_usd / 3600``. Prefill of one token uses
    ``1 / prefill_tokens_per_gpu_second`` GPU-seconds, decoding one token
    ``1 / decode_tokens_per_gpu_second``; one KV block held for an hour uses
    ``1 / kv_blocks_per_gpu`` GPU-hours (the share of a GPU's KV memory it occupies).
    """

    gpu_hour_usd: Decimal
    prefill_tokens_per_gpu_second: Decimal
    decode_tokens_per_gpu_second: Decimal
    kv_blocks_per_gpu: int
    kv_block_tokens: int = 16

    def _per_token_micros(self, tokens: int, tokens_per_gpu_second: Decimal) -> int:
        # tokens × (gpu_hour_usd × 1e6 µ$) / (3600 s × tokens_per_gpu_second), exactly.
        return div_half_even(
            tokens * scaled(self.gpu_hour_usd) * MICROS_PER_USD,
            3600 * scaled(tokens_per_gpu_second),
        )

    def prefill_micros(self, tokens: int) -> int:
        return self._per_token_micros(tokens, self.prefill_tokens_per_gpu_second)

    def decode_micros(self, tokens: int) -> int:
        return self._per_token_micros(tokens, self.decode_tokens_per_gpu_second)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.kv_block_tokens)  # ceil: a partial block occupies a block

    def kv_micros(self, *, tokens: int, seconds: Decimal) -> int:
        """Holding ``tokens`` (in whole KV blocks) for ``seconds`` (µs precision)."""
        micro_seconds = int(seconds.scaleb(6).to_integral_value(rounding=ROUND_HALF_EVEN))
        # blocks × hours × gpu_hour_usd × 1e6 / kv_blocks_per_gpu, exactly.
        return div_half_even(
            self.blocks_for(tokens) * micro_seconds * scaled(self.gpu_hour_usd),
            3600 * SCALE * self.kv_blocks_per_gpu,
        )


@dataclass(frozen=True)
class UsageCounts:
    """Raw token counts of one request (see the module docstring for the convention)."""

    prompt_tokens: int = 0
    cached_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        return (
            self.prompt_tokens
            - self.cached_read_tokens
            - self.cache_write_5m_tokens
            - self.cache_write_1h_tokens
        )

    def problems(self) -> list[str]:
        """Why these counts are impossible (empty when they are consistent)."""
        found = []
        for name in (
            "prompt_tokens",
            "cached_read_tokens",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "output_tokens",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                found.append(f"{name} must be a non-negative integer")
        if not found and self.uncached_input_tokens < 0:
            found.append("cached and cache-write tokens exceed prompt_tokens")
        return found


@dataclass(frozen=True)
class Cost:
    """A request's cost and what it would have cost without any caching."""

    micros: int
    without_cache_micros: int
    lines: dict[str, int]

    @property
    def saved_micros(self) -> int:
        return self.without_cache_micros - self.micros


def token_cost(counts: UsageCounts, rates: TokenRates) -> Cost:
    """Cost of a request on a per-token-priced provider (Vertex, Anthropic, OpenAI).

    The tier is chosen by total prompt size; the without-cache figure prices every prompt
    token as plain input at the same tier (the same request with caching off).
    """
    s_input, s_cached, s_w5, s_w1, s_output = rates.for_prompt(counts.prompt_tokens).scaled
    lines = {
        "input": div_half_even(counts.uncached_input_tokens * s_input, SCALE),
        "cached_read": div_half_even(counts.cached_read_tokens * s_cached, SCALE),
        "cache_write_5m": div_half_even(counts.cache_write_5m_tokens * s_w5, SCALE),
        "cache_write_1h": div_half_even(counts.cache_write_1h_tokens * s_w1, SCALE),
        "output": div_half_even(counts.output_tokens * s_output, SCALE),
    }
    without = div_half_even(counts.prompt_tokens * s_input, SCALE) + lines["output"]
    return Cost(micros=sum(lines.values()), without_cache_micros=without, lines=lines)


def gpu_cost(counts: UsageCounts, pool: PoolRates) -> Cost:
    """Chargeback of a request on a self-hosted pool.

    Prefill is charged for the tokens actually computed (prompt minus prefix-cache hits),
    decode for the output tokens. KV memory held by pinned prefixes is charged separately
    as block-hours (storage accruals). Without cache, every prompt token is prefilled.
    """
    computed = counts.prompt_tokens - counts.cached_read_tokens
    lines = {
        "prefill": pool.prefill_micros(computed),
        "decode": pool.decode_micros(counts.output_tokens),
    }
    without = pool.prefill_micros(counts.prompt_tokens) + lines["decode"]
    return Cost(micros=sum(lines.values()), without_cache_micros=without, lines=lines)


def storage_micros(*, tokens: int, seconds: Decimal, rate_per_mtok_hour: Decimal) -> int:
    """Storage of ``tokens`` for ``seconds`` (µs precision) at USD per 1M tokens per hour."""
    micro_seconds = int(seconds.scaleb(6).to_integral_value(rounding=ROUND_HALF_EVEN))
    return div_half_even(tokens * scaled(rate_per_mtok_hour) * micro_seconds, SCALE * SCALE * 3600)
