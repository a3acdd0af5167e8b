"""Price inputs: a model's per-token rates (tiers, modalities, discount windows) and a
self-hosted pool's GPU rates. Frozen dataclasses, so one price is safe to share and cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

from billing.pricing.units import (
    NANOS_PER_USD,
    SCALE,
    ZERO,
    div_half_even,
    micro_seconds,
    nanos_to_micros,
    scaled,
)

if TYPE_CHECKING:
    from billing.pricing.counts import UsageCounts

LONG_BASIS_PROMPT = "prompt"
LONG_BASIS_UNCACHED = "uncached_prompt"
LONG_BASES = (LONG_BASIS_PROMPT, LONG_BASIS_UNCACHED)


#: The lines a discount window may price explicitly (DeepSeek publishes off-peak prices
#: per line, not one percentage: deepseek-reasoner's 0.55 / 0.14 / 2.19 become 0.135 /
#: 0.035 / 0.550, i.e. 75.45 %, 75 % and 74.89 % off).
WINDOW_RATE_LINES = ("input", "cached_input", "output")


@dataclass(frozen=True)
class DiscountWindow:
    """A daily UTC window ``[start, end)`` in which requests pay ``100 - percent`` %, or,
    when ``rates`` is set, each line's own off-peak price (USD per 1M; percent is then
    informative only)."""

    start: time
    end: time
    percent: int
    rates: tuple[tuple[str, Decimal], ...] = ()

    def covers(self, at: datetime) -> bool:
        utc = at.utctimetuple()  # aware datetimes only (the ledger stores UTC)
        now = time(utc.tm_hour, utc.tm_min, utc.tm_sec)
        if self.start <= self.end:
            return self.start <= now < self.end
        return now >= self.start or now < self.end  # wraps midnight

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> DiscountWindow:
        """From ``{"start": "16:30", "end": "00:30", "percent": 50}`` (raises ValueError)."""
        start, end, percent = raw.get("start"), raw.get("end"), raw.get("percent", 0)
        rates = _window_rates(raw.get("rates"))
        low = 0 if rates else 1
        if not isinstance(percent, int) or isinstance(percent, bool) or not low <= percent <= 100:
            raise ValueError("percent must be an integer in 1..100")
        if not isinstance(start, str) or not isinstance(end, str):
            raise ValueError("start and end must be HH:MM strings (UTC)")
        window = cls(time.fromisoformat(start), time.fromisoformat(end), percent, rates)
        if window.start == window.end:
            raise ValueError("a discount window needs start != end")
        return window

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
            "percent": self.percent,
        }
        if self.rates:
            out["rates"] = {line: str(rate) for line, rate in self.rates}
        return out


def _window_rates(raw: Any) -> tuple[tuple[str, Decimal], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict) or set(raw) != set(WINDOW_RATE_LINES):
        raise ValueError(f"rates must name each of {', '.join(WINDOW_RATE_LINES)}")
    out = []
    for line in WINDOW_RATE_LINES:
        if line in raw:
            try:
                rate = Decimal(str(raw[line]))
            except ArithmeticError:
                raise ValueError(f"rates.{line} must be a decimal USD per 1M tokens") from None
            if not rate.is_finite() or rate < 0:
                raise ValueError(f"rates.{line} must be a non-negative decimal")
            scaled(rate)  # at most 6 decimal places (raises ValueError)
            out.append((line, rate))
    return tuple(out)


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
            input=rate_or(self.long_input, self.input),
            cached_input=rate_or(self.long_cached_input, self.cached_input),
            cache_write_5m=rate_or(self.long_cache_write_5m, self.cache_write_5m),
            cache_write_1h=rate_or(self.long_cache_write_1h, self.cache_write_1h),
            output=rate_or(self.long_output, self.output),
            storage_per_hour=rate_or(self.long_storage_per_hour, self.storage_per_hour),
            thinking=None if self.thinking is None else rate_or(self.long_output, self.thinking),
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

    def priced_at(self, at: datetime | None) -> tuple[TokenRates, int]:
        """The rates and the kept share for a request starting at ``at``: a window's own
        per-line prices replace those lines (kept at 100 %), its percentage applies to
        the others."""
        window = self.window_at(at)
        if window is None:
            return self, 100
        if not window.rates:
            return self, 100 - window.percent
        own = dict(window.rates)  # every line named (parse requires it)
        from dataclasses import replace

        return (
            replace(
                self,
                input=own["input"],
                cached_input=own["cached_input"],
                output=own["output"],
                cache_write_5m=own["input"],  # DeepSeek sells no explicit writes
                cache_write_1h=own["input"],
                thinking=None,
                discounts=(),
            ),
            100,
        )

    def window_at(self, at: datetime | None) -> DiscountWindow | None:
        if at is None:
            return None
        for window in self.discounts:
            if window.covers(at):
                return window
        return None

    def keep_percent(self, at: datetime | None) -> int:
        """The share of the price a request starting at ``at`` pays (100: no discount)."""
        if at is None:
            return 100
        for window in self.discounts:
            if window.covers(at):
                return 100 - window.percent
        return 100


def rate_or(value: Decimal | None, fallback: Decimal) -> Decimal:
    """A modality or tier rate, or the rate it falls back to when it is not set."""
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
            self.blocks_for(tokens) * micro_seconds(seconds) * scaled(self.gpu_hour_usd) * 1000,
            3600 * SCALE * self.kv_blocks_per_gpu,
        )
