"""The cost functions: a request on a per-token provider or a GPU pool, a cache write,
storage over time, and the upper bound a budget reservation holds before a request runs.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from billing.pricing.counts import Cost, UsageCounts
from billing.pricing.rates import PoolRates, TokenRates, rate_or
from billing.pricing.units import SCALE, div_half_even, line_nanos, micro_seconds, scaled


def token_cost(counts: UsageCounts, rates: TokenRates, at: datetime | None = None) -> Cost:
    """Cost of a request on a per-token-priced provider (Vertex, Anthropic, OpenAI, DeepSeek).

    The tier is chosen by the price's rule (``long_basis``), a time-of-day discount by
    ``at`` (the request's start); the without-cache figure prices every prompt token as
    plain input of its modality at the same tier and discount (caching off).
    """
    tier, keep = rates.for_counts(counts).priced_at(at)
    audio_uncached = counts.audio_prompt_tokens - counts.audio_cached_read_tokens
    audio_in = rate_or(tier.audio_input, tier.input)
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
            rate_or(tier.audio_cached_input, tier.cached_input),
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
            counts.thinking_tokens, rate_or(tier.thinking, tier.output), keep_percent=keep
        ),
        "output_audio": line_nanos(
            counts.audio_output_tokens, rate_or(tier.audio_output, tier.output), keep_percent=keep
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
        tokens * scaled(rate_per_mtok_hour) * micro_seconds(seconds), 3600 * SCALE * SCALE // 1000
    )


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
        rate_or(tier.audio_input, tier.input),
        rate_or(tier.audio_cached_input, tier.cached_input),
    )
    dearest_out = max(
        tier.output, rate_or(tier.thinking, tier.output), rate_or(tier.audio_output, tier.output)
    )
    lines = {
        "input": line_nanos(total_input, dearest_in),
        "output": line_nanos(max_output_tokens, dearest_out),
    }
    nanos = sum(lines.values())
    return Cost(nanos=nanos, without_cache_nanos=nanos, lines=lines)
