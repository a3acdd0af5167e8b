"""The economic TTL policy: keep a cache while it is expected to save more than it costs.

Pure Python, no Django, no I/O: the caches app feeds it each cache's observed query rate
and its prices and applies the decision.

* **Rate estimate.** ``ewma_update`` keeps a time-decayed event rate: at each hit the
  old estimate decays by ``e^(-Δt/τ)`` and the hit adds ``1/τ``. For a steady Poisson
  stream of λ queries per hour its expectation is λ; after a burst it falls off with
  time constant τ. ``ewma_decay`` reads the current value without a hit (at the TTL
  checkpoint).
* **Decision.** Over the next ``window`` the cache is expected to serve
  ``rate × window`` hits, each saving ``tokens × (miss − hit)``; keeping it costs
  ``tokens × storage × window``. Extend when savings exceed storage by the ``margin``,
  otherwise let it expire. (The window cancels out of the comparison — the test is
  ``rate > margin × storage / (miss − hit)``, the break-even rate — it sets how long an
  extension lasts before the next look.)
* **Budget pressure.** When the tenant has used ``near_budget`` (default 90 %) of a
  budget, TTLs are cut to ``short_ttl`` and new pins are refused.

Money is ``Decimal`` micro-USD (rates in USD per 1M tokens × tokens); the query rate is
a float estimate by nature and is converted to ``Decimal`` before it meets money.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

EXTEND = "extend"
EXPIRE = "expire"
SHORTEN = "shorten"


def _dec(value: Decimal | float | int) -> Decimal:
    """Exact Decimal of a number (floats through their shortest repr, not binary noise)."""
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _seconds_between(earlier: datetime | float, later: datetime | float) -> float:
    if isinstance(earlier, datetime) and isinstance(later, datetime):
        return (later - earlier).total_seconds()
    if isinstance(earlier, int | float) and isinstance(later, int | float):
        return float(later) - float(earlier)
    raise TypeError("last_at and now must both be datetimes or both epoch seconds")


def ewma_decay(
    *,
    rate_per_hour: float,
    last_at: datetime | float | None,
    now: datetime | float,
    tau_seconds: float = 900.0,
) -> float:
    """The rate estimate at ``now`` without a new hit (queries per hour)."""
    if last_at is None or rate_per_hour <= 0:
        return max(rate_per_hour, 0.0)
    elapsed = max(_seconds_between(last_at, now), 0.0)
    return rate_per_hour * math.exp(-elapsed / tau_seconds)


def ewma_update(
    *,
    rate_per_hour: float,
    last_at: datetime | float | None,
    now: datetime | float,
    tau_seconds: float = 900.0,
    hits: int = 1,
) -> float:
    """The rate estimate after ``hits`` queries at ``now`` (queries per hour).

    ``r ← r·e^(−Δt/τ) + hits·3600/τ``. Store the result and ``now`` as the new
    ``last_at``. ``tau_seconds`` is the memory: shorter reacts faster, longer is steadier.
    """
    if tau_seconds <= 0:
        raise ValueError("tau_seconds must be positive")
    if hits < 0:
        raise ValueError("hits must be zero or more")
    decayed = ewma_decay(
        rate_per_hour=rate_per_hour, last_at=last_at, now=now, tau_seconds=tau_seconds
    )
    return decayed + hits * 3600.0 / tau_seconds


@dataclass(frozen=True)
class CacheEconomics:
    """What keeping one cache costs and what a hit saves (USD per 1M tokens).

    ``miss_per_mtok``: what a query pays for the context without the cache (the input
    price, or on a GPU pool the prefill price); ``hit_per_mtok``: with it (the cached
    read price; 0 on a pool); ``storage_per_mtok_hour``: keeping it (Vertex storage, or a
    pool's KV block-hours per 1M tokens).
    """

    tokens: int
    miss_per_mtok: Decimal
    hit_per_mtok: Decimal
    storage_per_mtok_hour: Decimal

    def breakeven_rate_per_hour(self) -> Decimal:
        """Queries per hour above which keeping the cache pays (∞ if a hit saves nothing)."""
        saving = self.miss_per_mtok - self.hit_per_mtok
        if saving <= 0:
            return Decimal("Infinity")
        return self.storage_per_mtok_hour / saving


@dataclass(frozen=True)
class TtlDecision:
    """What to do with a cache's TTL now.

    ``ttl_seconds``: the TTL to set from now (``extend``/``shorten``), or what remains
    (``expire``: do not extend, let it run out). ``allow_new_pins``: whether the tenant
    may pin or create more caches now.
    """

    action: str
    ttl_seconds: int
    allow_new_pins: bool
    expected_savings_micros: Decimal
    storage_cost_micros: Decimal
    reason: str


def ttl_decision(
    *,
    rate_per_hour: float,
    economics: CacheEconomics,
    remaining_ttl_seconds: int,
    window_seconds: int = 300,
    budget_used_fraction: Decimal | float = 0,
    near_budget: Decimal | float = Decimal("0.9"),
    short_ttl_seconds: int = 300,
    margin: Decimal | float = Decimal(1),
    idle_seconds: float | None = None,
) -> TtlDecision:
    """Extend, let expire or shorten one cache's TTL (see the module docstring).

    ``rate_per_hour`` is the current EWMA estimate (decay it to now first);
    ``budget_used_fraction`` the highest spent/limit of the tenant's budgets (0 if none).
    """
    if window_seconds <= 0:
        raise ValueError("window_seconds must be positive")
    remaining = max(int(remaining_ttl_seconds), 0)
    hours = Decimal(window_seconds) / 3600
    tokens = Decimal(economics.tokens)
    rate_value = max(float(rate_per_hour), 0.0)
    if idle_seconds is not None and idle_seconds > 0:
        # A cache idle for u seconds is unlikely to see more than one query per u: the
        # estimate is capped at 3600/u queries per hour, so after a burst the cache is
        # never kept longer than the break-even gap (the rent-or-buy bound).
        rate_value = min(rate_value, 3600.0 / idle_seconds)
    rate = _dec(rate_value)
    saving_per_hit = tokens * (economics.miss_per_mtok - economics.hit_per_mtok)
    savings = rate * hours * saving_per_hit
    storage = tokens * economics.storage_per_mtok_hour * hours
    used, near = _dec(budget_used_fraction), _dec(near_budget)
    if used >= near:
        ttl = min(remaining, short_ttl_seconds)
        return TtlDecision(
            action=SHORTEN if remaining > short_ttl_seconds else EXPIRE,
            ttl_seconds=ttl,
            allow_new_pins=False,
            expected_savings_micros=savings,
            storage_cost_micros=storage,
            reason=f"budget {used:.0%} used (>= {near:.0%}): TTL capped, no new pins",
        )
    if saving_per_hit > 0 and savings > storage * _dec(margin):
        return TtlDecision(
            action=EXTEND,
            ttl_seconds=max(remaining, window_seconds),
            allow_new_pins=True,
            expected_savings_micros=savings,
            storage_cost_micros=storage,
            reason=f"expected savings {savings:.0f} > storage {storage:.0f} µ$ over the window",
        )
    return TtlDecision(
        action=EXPIRE,
        ttl_seconds=remaining,
        allow_new_pins=True,
        expected_savings_micros=savings,
        storage_cost_micros=storage,
        reason=f"expected savings {savings:.0f} <= storage {storage:.0f} µ$ over the window",
    )


def pin_allowed(
    *, budget_used_fraction: Decimal | float, near_budget: Decimal | float = Decimal("0.9")
) -> bool:
    """Whether a tenant may pin a new prefix or create a new cache under budget pressure."""
    return _dec(budget_used_fraction) < _dec(near_budget)
