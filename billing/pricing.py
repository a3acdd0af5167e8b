"""Cost arithmetic: exact, integer nano-USD, no Django.

Money is booked as an ``int`` of **nano-USD** (1 USD = 10^9 n$); micro-USD (µ$, 10^6 per
USD) is the unit budgets, the API and the console show, derived from nanos by one
half-even rounding of the *total* (never of each line). Rates are ``Decimal`` USD per one
million tokens (the unit providers publish, at most 6 decimal places), so a line item is
``tokens × rate × 1000`` n$, computed as an exact rational number (no floats) and rounded
once, half-even, to whole nanos. A rate has at most 6 decimals, so a per-token line is
exact to 10^-3 n$: a Flash-Lite request of 5 tokens at $0.10/M is exactly 500 n$ and ten
thousand of them are exactly 5,000 µ$ (whole-µ$ rounding per request booked 0).

Usage counts follow one convention whatever the provider reports:

- ``prompt_tokens`` is every input token of the request, *including* cached reads and
  cache writes; ``cached_read_tokens``, ``cache_write_5m_tokens`` and
  ``cache_write_1h_tokens`` are subsets of it; the rest is plain (uncached) input.
  (Anthropic reports ``input_tokens`` without the cache tokens: the gateway adds them.)
- ``audio_prompt_tokens`` is the audio part of the prompt (cached or not) and
  ``audio_cached_read_tokens`` the audio part of the cached reads (Vertex
  ``promptTokensDetails`` / ``cacheTokensDetails`` by modality); audio is priced at the
  model's audio input rates, everything else at the text rates.
- ``output_tokens`` is the visible (text) output; ``thinking_tokens`` (Gemini
  ``thoughtsTokenCount``, reasoning tokens) and ``audio_output_tokens`` come on top of it,
  priced at the thinking and audio output rates (by default the output rate).

Long-context tiers: a model price may name a threshold and *which tokens count*
(``LONG_BASIS_PROMPT``: every input token, cached and written ones included, as Gemini
2.5 Pro and Claude Sonnet 4.5 do; ``LONG_BASIS_UNCACHED``: only input not read from a
cache). A request whose count is strictly **above** the threshold pays the long rates on
*every* line (200,000 tokens is still the base tier; 200,001 is not).

Time-of-day discounts (DeepSeek's off-peak window) apply a percentage to every line of a
request that starts inside a UTC window; windows may wrap midnight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time
from decimal import ROUND_HALF_EVEN, Decimal
from functools import cached_property
from typing import Any

ZERO = Decimal(0)
SECONDS_PER_HOUR = Decimal(3600)
MICROS_PER_USD = 1_000_000
NANOS_PER_USD = 1_000_000_000
NANOS_PER_MICRO = 1_000
SCALE = 10**6  # rates carry at most 6 decimal places

LONG_BASIS_PROMPT = "prompt"
LONG_BASIS_UNCACHED = "uncached_prompt"
LONG_BASES = (LONG_BASIS_PROMPT, LONG_BASIS_UNCACHED)

# The cache TTLs each provider really offers, in seconds (None: any TTL its API accepts,
# from ``PROVIDER_MIN_TTL`` up). Anthropic sells exactly two: 5 minutes (writes 1.25x)
# and 1 hour (writes 2x); a 30-minute TTL does not exist there and is refused rather than
# priced at the 1-hour rate. Vertex explicit caches take any TTL from 60 s (no documented
# maximum); OpenAI and DeepSeek cache automatically, so a TTL there is a modelling
# assumption for the break-even analysis (any positive value), not a purchase.
PROVIDER_TTL_CHOICES: dict[str, tuple[int, ...] | None] = {
    "anthropic": (300, 3600),
    "vertex": None,
    "vllm": None,
    "openai": None,
    "deepseek": None,
}
PROVIDER_MIN_TTL = {"vertex": 60, "vllm": 1}


def round_micros(value: Decimal) -> int:
    """Round an exact micro-USD amount half-even to an integer."""
    return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))


def div_half_even(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded half-even, exactly (any sign, denominator > 0)."""
    quotient, remainder = divmod(numerator, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2):
        quotient += 1
    return quotient


def nanos_to_micros(nanos: int) -> int:
    """The µ$ figure of an exact nano amount: one half-even rounding of the total."""
    return div_half_even(nanos, NANOS_PER_MICRO)


def scaled(rate: Decimal) -> int:
    """``rate × 10^6`` as an exact integer (rates have at most 6 decimal places)."""
    value = rate.scaleb(6)
    if value != value.to_integral_value():
        raise ValueError(f"rate {rate} has more than 6 decimal places")
    return int(value)


def line_nanos(tokens: int, rate_per_mtok: Decimal, *, keep_percent: int = 100) -> int:
    """Cost of ``tokens`` at ``rate_per_mtok`` USD per 1M tokens, in nano-USD.

    ``tokens × rate / 10^6 USD × 10^9 n$/USD = tokens × scaled(rate) / 10^3``; a
    discount keeps ``keep_percent`` % of it, in the same single rounding.
    """
    return div_half_even(tokens * scaled(rate_per_mtok) * keep_percent, 1000 * 100)


def _micro_seconds(seconds: Decimal) -> int:
    return int(seconds.scaleb(6).to_integral_value(rounding=ROUND_HALF_EVEN))


@dataclass(frozen=True)
class DiscountWindow:
    """A daily UTC window ``[start, end)`` in which requests pay ``100 - percent`` %."""

    start: time
    end: time
    percent: int

    def covers(self, at: datetime) -> bool:
        utc = at.utctimetuple()  # aware datetimes only (the ledger stores UTC)
        now = time(utc.tm_hour, utc.tm_min, utc.tm_sec)
        if self.start <= self.end:
            return self.start <= now < self.end
        return now >= self.start or now < self.end  # wraps midnight

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> DiscountWindow:
        """From ``{"start": "16:30", "end": "00:30", "percent": 50}`` (raises ValueError)."""
        start, end, percent = raw.get("start"), raw.get("end"), raw.get("percent")
        if not isinstance(percent, int) or isinstance(percent, bool) or not 0 < percent <= 100:
            raise ValueError("percent must be an integer in 1..100")
        if not isinstance(start, str) or not isinstance(end, str):
            raise ValueError("start and end must be HH:MM strings (UTC)")
        window = cls(time.fromisoformat(start), time.fromisoformat(end), percent)
        if window.start == window.end:
            raise ValueError("a discount window needs start != end")
        return window

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
            "percent": self.percent,
        }


@dataclass(frozen=True)
class TokenRates:
    """Per-token prices of one model version (USD per 1M tokens).

    ``long_*`` apply to the whole request when its tier count (``long_basis``) is above
    ``long_threshold``. Modality and thinking rates left ``None`` fall back to the text
    rate of the same line (input, cached input, output).
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
    long_basis: str = LONG_BASIS_PROMPT
    thinking: Decimal | None = None
    audio_input: Decimal | None = None
    audio_cached_input: Decimal | None = None
    audio_output: Decimal | None = None
    long_storage_per_hour: Decimal | None = None
    discounts: tuple[DiscountWindow, ...] = field(default_factory=tuple)

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
        # Long-tier thinking/audio: the long output/input rate scaled like the base one is
        # not published anywhere; the long text rate applies unless a modality rate is set.
        return TokenRates(
            input=_or(self.long_input, self.input),
            cached_input=_or(self.long_cached_input, self.cached_input),
            cache_write_5m=_or(self.long_cache_write_5m, self.cache_write_5m),
            cache_write_1h=_or(self.long_cache_write_1h, self.cache_write_1h),
            output=_or(self.long_output, self.output),
            storage_per_hour=_or(self.long_storage_per_hour, self.storage_per_hour),
            thinking=None if self.thinking is None else _or(self.long_output, self.thinking),
            audio_input=self.audio_input,
            audio_cached_input=self.audio_cached_input,
            audio_output=self.audio_output,
            discounts=self.discounts,
        )

    def tier_count(self, counts: UsageCounts) -> int:
        """The tokens that decide the tier under this price's rule."""
        if self.long_basis == LONG_BASIS_UNCACHED:
            return counts.prompt_tokens - counts.cached_read_tokens
        return counts.prompt_tokens

    def for_prompt(self, prompt_tokens: int) -> TokenRates:
        """The rates that apply to a request with this many tier-counted tokens."""
        if self.long_threshold is None or prompt_tokens <= self.long_threshold:
            return self
        return self.long_rates

    def for_counts(self, counts: UsageCounts) -> TokenRates:
        return self.for_prompt(self.tier_count(counts))

    def keep_percent(self, at: datetime | None) -> int:
        """The share of the price a request starting at ``at`` pays (100: no discount)."""
        if at is None:
            return 100
        for window in self.discounts:
            if window.covers(at):
                return 100 - window.percent
        return 100


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

    def _per_token_nanos(self, tokens: int, tokens_per_gpu_second: Decimal) -> int:
        # tokens × (gpu_hour_usd × 1e9 n$) / (3600 s × tokens_per_gpu_second), exactly
        # (both scaled by 10^6, which cancels).
        return div_half_even(
            tokens * scaled(self.gpu_hour_usd) * NANOS_PER_USD,
            3600 * scaled(tokens_per_gpu_second),
        )

    def prefill_nanos(self, tokens: int) -> int:
        return self._per_token_nanos(tokens, self.prefill_tokens_per_gpu_second)

    def decode_nanos(self, tokens: int) -> int:
        return self._per_token_nanos(tokens, self.decode_tokens_per_gpu_second)

    def prefill_micros(self, tokens: int) -> int:
        return nanos_to_micros(self.prefill_nanos(tokens))

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.kv_block_tokens)  # ceil: a partial block occupies a block

    def kv_nanos(self, *, tokens: int, seconds: Decimal) -> int:
        """Holding ``tokens`` (in whole KV blocks) for ``seconds`` (µs precision)."""
        # blocks × hours × gpu_hour_usd × 1e9 / kv_blocks_per_gpu, exactly.
        return div_half_even(
            self.blocks_for(tokens) * _micro_seconds(seconds) * scaled(self.gpu_hour_usd) * 1000,
            3600 * SCALE * self.kv_blocks_per_gpu,
        )


COUNT_FIELDS = (
    "prompt_tokens",
    "cached_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "thinking_tokens",
    "audio_prompt_tokens",
    "audio_cached_read_tokens",
    "audio_output_tokens",
)


@dataclass(frozen=True)
class UsageCounts:
    """Raw token counts of one request (see the module docstring for the convention)."""

    prompt_tokens: int = 0
    cached_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0
    thinking_tokens: int = 0
    audio_prompt_tokens: int = 0
    audio_cached_read_tokens: int = 0
    audio_output_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        return (
            self.prompt_tokens
            - self.cached_read_tokens
            - self.cache_write_5m_tokens
            - self.cache_write_1h_tokens
        )

    @property
    def total_output_tokens(self) -> int:
        return self.output_tokens + self.thinking_tokens + self.audio_output_tokens

    def problems(self) -> list[str]:
        """Why these counts are impossible (empty when they are consistent)."""
        found = []
        for name in COUNT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                found.append(f"{name} must be a non-negative integer")
        if found:
            return found
        if self.uncached_input_tokens < 0:
            found.append("cached and cache-write tokens exceed prompt_tokens")
        if self.audio_cached_read_tokens > self.cached_read_tokens:
            found.append("audio_cached_read_tokens exceed cached_read_tokens")
        if self.audio_prompt_tokens - self.audio_cached_read_tokens > max(
            self.uncached_input_tokens, 0
        ):
            found.append("uncached audio tokens exceed the uncached prompt")
        return found


@dataclass(frozen=True)
class Cost:
    """A request's cost and what it would have cost without any caching (nano-USD)."""

    nanos: int
    without_cache_nanos: int
    lines: dict[str, int]

    @property
    def micros(self) -> int:
        return nanos_to_micros(self.nanos)

    @property
    def without_cache_micros(self) -> int:
        return nanos_to_micros(self.without_cache_nanos)

    @property
    def saved_nanos(self) -> int:
        return self.without_cache_nanos - self.nanos

    @property
    def saved_micros(self) -> int:
        return nanos_to_micros(self.saved_nanos)


def token_cost(counts: UsageCounts, rates: TokenRates, at: datetime | None = None) -> Cost:
    """Cost of a request on a per-token-priced provider (Vertex, Anthropic, OpenAI, DeepSeek).

    The tier is chosen by the price's rule (``long_basis``), a time-of-day discount by
    ``at`` (the request's start); the without-cache figure prices every prompt token as
    plain input of its modality at the same tier and discount (caching off).
    """
    tier = rates.for_counts(counts)
    keep = tier.keep_percent(at)
    audio_uncached = counts.audio_prompt_tokens - counts.audio_cached_read_tokens
    audio_in = _or(tier.audio_input, tier.input)
    lines = {
        "input": line_nanos(
            counts.uncached_input_tokens - audio_uncached, tier.input, keep_percent=keep
        ),
        "input_audio": line_nanos(audio_uncached, audio_in, keep_percent=keep),
        "cached_read": line_nanos(
            counts.cached_read_tokens - counts.audio_cached_read_tokens,
            tier.cached_input,
            keep_percent=keep,
        ),
        "cached_read_audio": line_nanos(
            counts.audio_cached_read_tokens,
            _or(tier.audio_cached_input, tier.cached_input),
            keep_percent=keep,
        ),
        "cache_write_5m": line_nanos(
            counts.cache_write_5m_tokens, tier.cache_write_5m, keep_percent=keep
        ),
        "cache_write_1h": line_nanos(
            counts.cache_write_1h_tokens, tier.cache_write_1h, keep_percent=keep
        ),
        "output": line_nanos(counts.output_tokens, tier.output, keep_percent=keep),
        "thinking": line_nanos(
            counts.thinking_tokens, _or(tier.thinking, tier.output), keep_percent=keep
        ),
        "output_audio": line_nanos(
            counts.audio_output_tokens, _or(tier.audio_output, tier.output), keep_percent=keep
        ),
    }
    outputs = lines["output"] + lines["thinking"] + lines["output_audio"]
    without = (
        line_nanos(counts.prompt_tokens - counts.audio_prompt_tokens, tier.input, keep_percent=keep)
        + line_nanos(counts.audio_prompt_tokens, audio_in, keep_percent=keep)
        + outputs
    )
    return Cost(nanos=sum(lines.values()), without_cache_nanos=without, lines=lines)


def gpu_cost(counts: UsageCounts, pool: PoolRates) -> Cost:
    """Chargeback of a request on a self-hosted pool.

    Prefill is charged for the tokens actually computed (prompt minus prefix-cache hits),
    decode for every generated token (visible, thinking, audio). KV memory held by pinned
    prefixes is charged separately as block-hours (storage accruals). Without cache,
    every prompt token is prefilled.
    """
    computed = counts.prompt_tokens - counts.cached_read_tokens
    lines = {
        "prefill": pool.prefill_nanos(computed),
        "decode": pool.decode_nanos(counts.total_output_tokens),
    }
    without = pool.prefill_nanos(counts.prompt_tokens) + lines["decode"]
    return Cost(nanos=sum(lines.values()), without_cache_nanos=without, lines=lines)


def cache_creation_cost(*, tokens: int, rates: TokenRates, ttl_seconds: int) -> Cost:
    """What writing ``tokens`` into an explicit cache costs (Vertex: the input price).

    Priced as a cache write of the TTL's tier (on Vertex both write rates equal the input
    price) at the tier the cached tokens fall into. Without caching the write would not
    happen at all, so its without-cache figure is 0: creation is pure caching overhead.
    """
    counts = (
        UsageCounts(prompt_tokens=tokens, cache_write_5m_tokens=tokens)
        if ttl_seconds <= 300
        else UsageCounts(prompt_tokens=tokens, cache_write_1h_tokens=tokens)
    )
    cost = token_cost(counts, rates)
    return Cost(nanos=cost.nanos, without_cache_nanos=0, lines=cost.lines)


def storage_nanos(*, tokens: int, seconds: Decimal, rate_per_mtok_hour: Decimal) -> int:
    """Storage of ``tokens`` for ``seconds`` (µs precision) at USD per 1M tokens per hour."""
    # tokens × scaled/1e6 USD/h × µs/3.6e9 h × 1e9 n$ = tokens × scaled × µs / 3.6e12.
    return div_half_even(
        tokens * scaled(rate_per_mtok_hour) * _micro_seconds(seconds), 3600 * SCALE * SCALE // 1000
    )


def ttl_offered(*, provider: str, ttl_seconds: int) -> bool:
    """Whether ``provider`` sells a cache with this TTL (see ``PROVIDER_TTL_CHOICES``)."""
    choices = PROVIDER_TTL_CHOICES.get(provider)
    if choices is None:
        return ttl_seconds >= PROVIDER_MIN_TTL.get(provider, 1)
    return ttl_seconds in choices


def request_cost_upper_bound(
    *,
    rates: TokenRates,
    prompt_tokens: int,
    max_output_tokens: int,
    cache_tokens: int = 0,
) -> Cost:
    """A true upper bound of a request's cost before it runs (for budget reservations).

    ``prompt_tokens`` is what the client sent, ``cache_tokens`` what a referenced cache
    adds to the prompt on the provider's side (Vertex counts them in promptTokenCount);
    ``max_output_tokens`` the request's ``max_tokens`` or, when absent, the model's
    maximum output. Every input token is priced at the dearest input-side rate (plain,
    audio, cached, either write) and every output token at the dearest output-side rate
    (text, thinking, audio) of the tier the whole input falls into, with no discount.
    """
    total_input = prompt_tokens + cache_tokens
    tier = rates.for_prompt(total_input)
    dearest_in = max(
        tier.input,
        tier.cached_input,
        tier.cache_write_5m,
        tier.cache_write_1h,
        _or(tier.audio_input, tier.input),
        _or(tier.audio_cached_input, tier.cached_input),
    )
    dearest_out = max(
        tier.output, _or(tier.thinking, tier.output), _or(tier.audio_output, tier.output)
    )
    lines = {
        "input": line_nanos(total_input, dearest_in),
        "output": line_nanos(max_output_tokens, dearest_out),
    }
    nanos = sum(lines.values())
    return Cost(nanos=nanos, without_cache_nanos=nanos, lines=lines)


def micros_ceil(nanos: int) -> int:
    """Nanos to µ$ rounded up (a reservation must not be below the cost it bounds)."""
    return -(-nanos // NANOS_PER_MICRO)
