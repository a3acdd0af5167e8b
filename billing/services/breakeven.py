"""Break-even analysis: when does keeping a context cached cost less than not caching it?

Only the cached context matters (the suffix and the output cost the same either way).
With ``C`` context tokens, ``q`` queries per hour and a TTL of ``T`` hours:

* **Storage-priced** (Vertex explicit caches; self-hosted pools, where storage is KV
  block-hours and a hit skips the prefill): a miss costs ``C·input``, a hit
  ``C·cached``, keeping the cache ``C·storage`` per hour and creating it ``C·write``
  (Vertex: the input price) once per TTL. Hourly cost with cache =
  ``C·storage + q·C·cached + C·write/T``; without = ``q·C·input``. Break-even (steady
  state, the cache kept alive): ``q* = storage / (input - cached)`` (the spec's 2.5 Pro
  example: 4.50 / (1.25 - 0.125) = 4 hits per hour); including one creation per TTL:
  ``q* = (storage + write/T) / (input - cached)``.
* **Write-premium** (Anthropic: writes 1.25× for 5 minutes, 2× for 1 hour, reads 0.1×;
  OpenAI from GPT-5.6: writes 1.25×): no storage fee, the TTL slides on every hit. With
  Poisson arrivals a query finds the cache alive with probability ``1 - e^(-qT)``, so a
  query costs ``e^(-qT)·write + (1 - e^(-qT))·read`` on average; break-even
  ``q* = ln((write - read) / (input - read)) / T`` (0 when writes cost no more than
  plain input: caching then never loses).

Money is integer micro-USD, each figure rounded once, half-even. The write-premium
expectation uses ``exp`` (a float) for the hit probability: these are estimates for a
decision, never booked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing.errors import InvalidUsage, PriceNotFound, TtlNotOffered
from billing.models import Provider, UsageKind
from billing.pricing import (
    MICROS_PER_USD,
    PROVIDER_TTL_CHOICES,
    nanos_to_micros,
    round_micros,
    ttl_offered,
)
from billing.selectors.prices import (
    model_price_resolve,
    pool_price_resolve,
    pool_rates,
    token_rates,
)
from billing.selectors.usage import usage_list
from tenants.models import Tenant

FIVE_MINUTES = timedelta(minutes=5)
RATE_PLACES = Decimal("0.0001")


@dataclass(frozen=True)
class BreakEven:
    """Hourly economics of caching one context (integer micro-USD, rates in queries/h)."""

    mode: str  # "storage" | "write_premium"
    context_tokens: int
    queries_per_hour: Decimal
    ttl_seconds: int
    miss_cost_micros: int
    hit_cost_micros: int
    create_cost_micros: int
    storage_per_hour_micros: int
    hourly_cost_without_cache_micros: int
    hourly_cost_with_cache_micros: int
    hourly_saving_micros: int
    breakeven_queries_per_hour: Decimal
    breakeven_queries_per_hour_incl_create: Decimal
    price_version: str


@dataclass(frozen=True)
class Blended:
    """The DOMAIN.md view: a daily token volume with a hit ratio, over ``days``."""

    blended_input_per_mtok: Decimal
    daily_cost_micros: int
    daily_cost_without_cache_micros: int
    period_cost_micros: int
    period_cost_without_cache_micros: int
    days: int


def _rates_for(
    *, provider: str, model: str, pool: str, at: datetime, ttl: timedelta, context_tokens: int
) -> tuple[Decimal, Decimal, Decimal, Decimal, str]:
    """(input, cached, write, storage per hour), USD per 1M tokens, and the version label.

    Per-token providers: the tier is chosen by the context size; the write rate by the
    TTL (5-minute writes up to 5 minutes, 1-hour writes beyond). Pools: "input" and
    "write" are prefilling 1M tokens, a hit prefills nothing, storage is holding 1M
    tokens' KV blocks for an hour.
    """
    if provider == Provider.VLLM:
        gpu_price = pool_price_resolve(pool=pool, at=at) if pool else None
        if gpu_price is None:
            raise PriceNotFound(f"No GPU price for pool {pool!r}.")
        gpu = pool_rates(gpu_price)
        prefill = Decimal(gpu.prefill_micros(1_000_000)) / MICROS_PER_USD
        storage = Decimal(gpu.blocks_for(1_000_000)) * gpu.gpu_hour_usd / gpu.kv_blocks_per_gpu
        return prefill, Decimal(0), prefill, storage, f"pool:{gpu_price.pk}"
    price = model_price_resolve(provider=provider, model=model, at=at)
    if price is None:
        raise PriceNotFound(f"No price for {provider}:{model}.", details={"model": model})
    rates = token_rates(price).for_prompt(context_tokens)
    write = rates.cache_write_5m if ttl <= FIVE_MINUTES else rates.cache_write_1h
    return rates.input, rates.cached_input, write, rates.storage_per_hour, f"model:{price.pk}"


def breakeven(
    *,
    provider: str,
    model: str,
    context_tokens: int,
    queries_per_hour: Decimal,
    ttl: timedelta,
    pool: str = "",
    at: datetime | None = None,
) -> BreakEven:
    """Hourly cost with and without a cache and the break-even query rate (module doc).

    The tier is chosen by ``context_tokens`` (a >200k context prices at the long tier).
    Raises InvalidUsage (bad inputs) and PriceNotFound.
    """
    if not isinstance(context_tokens, int) or not 0 < context_tokens < 2**31:
        raise InvalidUsage("context_tokens must be a positive integer.")
    if queries_per_hour < 0 or not queries_per_hour.is_finite():
        raise InvalidUsage("queries_per_hour must be zero or more.")
    if ttl <= timedelta(0):
        raise InvalidUsage("ttl must be positive.")
    ttl_seconds = int(ttl.total_seconds())
    if not ttl_offered(provider=provider, ttl_seconds=ttl_seconds):
        raise TtlNotOffered(
            f"{provider} offers no {ttl_seconds}s cache TTL.",
            details={"provider": provider, "offered": PROVIDER_TTL_CHOICES.get(provider)},
        )
    at = at or timezone.now()
    input_rate, cached, write, storage, version = _rates_for(
        provider=provider, model=model, pool=pool, at=at, ttl=ttl, context_tokens=context_tokens
    )
    c = Decimal(context_tokens)
    q = queries_per_hour
    t_hours = Decimal(ttl.total_seconds()) / 3600
    miss, hit, create = c * input_rate, c * cached, c * write
    saving_per_hit = input_rate - cached
    if storage > 0 or provider == Provider.VLLM:
        mode = "storage"
        store = c * storage
        without = q * miss
        with_cache = store + q * hit + create / t_hours
        steady = storage / saving_per_hit if saving_per_hit > 0 else Decimal("Infinity")
        incl_create = (storage + write / t_hours) / saving_per_hit if saving_per_hit > 0 else steady
    else:
        mode = "write_premium"
        store = Decimal(0)
        p_miss = Decimal(repr(math.exp(-float(q * t_hours))))
        without = q * miss
        with_cache = q * (p_miss * create + (1 - p_miss) * hit)
        if write <= input_rate:
            steady = Decimal(0)
        elif input_rate <= cached:
            steady = Decimal("Infinity")
        else:
            ratio = float((write - cached) / (input_rate - cached))
            steady = Decimal(repr(math.log(ratio))) / t_hours
        incl_create = steady
    return BreakEven(
        mode=mode,
        context_tokens=context_tokens,
        queries_per_hour=q,
        ttl_seconds=int(ttl.total_seconds()),
        miss_cost_micros=round_micros(miss),
        hit_cost_micros=round_micros(hit),
        create_cost_micros=round_micros(create),
        storage_per_hour_micros=round_micros(store),
        hourly_cost_without_cache_micros=round_micros(without),
        hourly_cost_with_cache_micros=round_micros(with_cache),
        hourly_saving_micros=round_micros(without) - round_micros(with_cache),
        breakeven_queries_per_hour=_rate(steady),
        breakeven_queries_per_hour_incl_create=_rate(incl_create),
        price_version=version,
    )


def _rate(value: Decimal) -> Decimal:
    return value if not value.is_finite() else value.quantize(RATE_PLACES)


def blended_cost(
    *,
    provider: str,
    model: str,
    input_tokens_per_day: int,
    hit_ratio: Decimal,
    days: int = 30,
    at: datetime | None = None,
) -> Blended:
    """Input spend of a daily volume when ``hit_ratio`` of its tokens are read from cache.

    DOMAIN.md's example: 100M tokens a day at $3.00/M with 80 % read at $0.30/M blends to
    $0.84/M: $2,520 for 30 days instead of $9,000. (Cache writes are not modelled here.)
    """
    if not isinstance(input_tokens_per_day, int) or input_tokens_per_day < 0:
        raise InvalidUsage("input_tokens_per_day must be a non-negative integer.")
    if not Decimal(0) <= hit_ratio <= Decimal(1):
        raise InvalidUsage("hit_ratio must be between 0 and 1.")
    if not isinstance(days, int) or not 1 <= days <= 366:
        raise InvalidUsage("days must be 1-366.")
    price = model_price_resolve(provider=provider, model=model, at=at or timezone.now())
    if price is None:
        raise PriceNotFound(f"No price for {provider}:{model}.", details={"model": model})
    rates = token_rates(price)
    blended = (1 - hit_ratio) * rates.input + hit_ratio * rates.cached_input
    tokens = Decimal(input_tokens_per_day)
    return Blended(
        blended_input_per_mtok=blended,
        daily_cost_micros=round_micros(tokens * blended),
        daily_cost_without_cache_micros=round_micros(tokens * rates.input),
        period_cost_micros=round_micros(tokens * days * blended),
        period_cost_without_cache_micros=round_micros(tokens * days * rates.input),
        days=days,
    )


@dataclass(frozen=True)
class AutopilotSavings:
    """What the cache-breakpoint autopilot's own breakpoints earned over a period."""

    requests: int  # requests whose breakpoints the autopilot placed
    cached_read_tokens: int
    cost_micros: int
    cost_without_cache_micros: int
    saving_micros: int  # without cache minus with: read savings net of write premiums

    @property
    def saving_usd(self) -> Decimal:
        return Decimal(self.saving_micros) / MICROS_PER_USD

    @property
    def cost_usd(self) -> Decimal:
        return Decimal(self.cost_micros) / MICROS_PER_USD

    @property
    def cost_without_cache_usd(self) -> Decimal:
        return Decimal(self.cost_without_cache_micros) / MICROS_PER_USD


def autopilot_savings(
    *, tenant: Tenant, since: datetime, until: datetime | None = None
) -> AutopilotSavings:
    """The ledger's figures for ``tenant``'s requests whose cache breakpoints the
    autopilot placed (``UsageRecord.autopilot`` such as ``system:1h,end:5m``; not the
    client's own, none placed, or a ``prompt_cache_key``), in ``[since, until)``. One
    query; the saving is exact (the ledger's costs with and without the cache)."""
    placed = (
        usage_list(tenant=tenant, since=since, until=until)
        .filter(kind=UsageKind.REQUEST)
        .exclude(Q(autopilot="") | Q(autopilot="client"))
        .exclude(autopilot__startswith="none:")
        .exclude(autopilot__startswith="prompt_cache_key:")
    )
    row = placed.aggregate(
        requests=Count("id"),
        cached=Coalesce(Sum("cached_read_tokens"), 0),
        cost=Coalesce(Sum("cost_nanos"), 0),
        without=Coalesce(Sum("cost_without_cache_nanos"), 0),
    )
    cost, without = nanos_to_micros(int(row["cost"])), nanos_to_micros(int(row["without"]))
    return AutopilotSavings(
        requests=int(row["requests"]),
        cached_read_tokens=int(row["cached"]),
        cost_micros=cost,
        cost_without_cache_micros=without,
        saving_micros=without - cost,
    )
