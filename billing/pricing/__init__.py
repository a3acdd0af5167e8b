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

The package is split by concern: ``units`` (nano/micro-USD and exact rounding), ``rates``
(model and pool prices), ``counts`` (usage counts and ``Cost``), ``costs`` (the cost
functions) and ``ttl`` (the TTLs each provider sells). Import from ``billing.pricing``.
"""

from billing.pricing.costs import (
    cache_creation_cost,
    gpu_cost,
    request_cost_upper_bound,
    storage_nanos,
    token_cost,
)
from billing.pricing.counts import (
    COUNT_FIELDS,
    Cost,
    UsageCounts,
)
from billing.pricing.rates import (
    LONG_BASES,
    LONG_BASIS_PROMPT,
    LONG_BASIS_UNCACHED,
    DiscountWindow,
    PoolRates,
    TokenRates,
    rate_or,
)
from billing.pricing.ttl import (
    PROVIDER_MIN_TTL,
    PROVIDER_TTL_CHOICES,
    ttl_offered,
)
from billing.pricing.units import (
    MICROS_PER_USD,
    NANOS_PER_MICRO,
    NANOS_PER_USD,
    SCALE,
    SECONDS_PER_HOUR,
    ZERO,
    div_half_even,
    line_nanos,
    micro_seconds,
    micros_ceil,
    nanos_to_micros,
    round_micros,
    scaled,
)

__all__ = [
    "COUNT_FIELDS",
    "Cost",
    "DiscountWindow",
    "LONG_BASES",
    "LONG_BASIS_PROMPT",
    "LONG_BASIS_UNCACHED",
    "MICROS_PER_USD",
    "NANOS_PER_MICRO",
    "NANOS_PER_USD",
    "PROVIDER_MIN_TTL",
    "PROVIDER_TTL_CHOICES",
    "PoolRates",
    "SCALE",
    "SECONDS_PER_HOUR",
    "TokenRates",
    "UsageCounts",
    "ZERO",
    "cache_creation_cost",
    "div_half_even",
    "gpu_cost",
    "line_nanos",
    "micro_seconds",
    "micros_ceil",
    "nanos_to_micros",
    "rate_or",
    "request_cost_upper_bound",
    "round_micros",
    "scaled",
    "storage_nanos",
    "token_cost",
    "ttl_offered",
]
