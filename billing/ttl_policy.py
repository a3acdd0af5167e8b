"""The economic TTL policy: keep a cache while it is expected to save more than it costs.

Pure Python, no Django, no I/O: the caches app feeds it each context's observed gaps and
its prices and applies the decision. There is one economic rule, :func:`autopilot_decide`
(a keep-alive learned from the context's own gaps, at the end of this module), asked at
creation, at the hit flush and at each review; ``bench/ttl_policy.py`` measures it as the
app runs it. (An older rate-against-break-even rule, ``ttl_decision``, ran beside it for
unpriced caches and callers of its interface; it is gone: an unpriced cache slides.)

* **Rate estimate** (shown in the console, not a decision input): ``ewma_update`` keeps a
  time-decayed event rate: at each hit the old estimate decays by ``e^(-Δt/τ)`` and the hit
  adds ``1/τ``. For a steady Poisson stream of λ queries per hour its expectation is λ.
* **Budget pressure.** At ``NEAR_BUDGET`` of a budget keep-alives are capped at
  ``SHORT_TTL_SECONDS``, refreshes stop and new caches are refused; at ``OVER_BUDGET`` live
  caches are dropped at the next review.

Money is ``Decimal`` USD per 1M tokens; gaps are float seconds by nature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

EXTEND = "extend"
EXPIRE = "expire"
SHORTEN = "shorten"
KEEP = "keep"
REFUSE = "refuse"


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


# --- The autopilot: a learned keep-alive per context -----------------------------------
#
# The hindsight optimum keeps a cache across a gap ``g`` between two queries iff storing
# it for the gap costs less than the miss it avoids: ``g < G*`` with the break-even gap
# ``G* = (miss - hit) / storage per second``. Online, the autopilot keeps the cache for
# ``k`` seconds after each query, with ``k`` chosen to minimise the cost the *observed*
# gaps of this context would have had (recent gaps weigh more):
#
#     cost(k) / storage-rate = sum_i w_i * (g_i if g_i < k else k + G*)
#
# (each gap smoothed over ``GAP_SPREAD``, so one unlucky sample does not set ``k``)
# (the constant hit price cancels). The minimum is at ``k = 0`` or just above one of the
# observed gaps, so the search is exact over a few dozen candidates. With no history
# yet it uses ``k = G*`` (the rent-or-buy rule, never worse than twice the optimum). A
# context's gaps survive its cache being re-created (``billing.models.TtlProfile``).
#
# Review points, the same in the app and in ``bench/ttl_policy.py`` (both call the two
# functions at the end of this module):
#   1. creation (``autopilot_creation_decide``, from what was known before this use of
#      the content): created for ``ttl_from(now)``, at least ``min_ttl``; the creation is
#      then learned as a use and the cache reviewed at once (3.);
#   2. hits (as the hit flush reports them): the gap is learned and a review is asked for
#      when the expiry should move to ``last query + k``;
#   3. reviews (``autopilot_review_ttl``: the refresh TTL, if any), before expiry, at once
#      after a creation or refresh, and after each burst (which ends in one); budget
#      pressure is applied here and on every other point.

GAP_MEMORY = 48
GAP_DECAY = 0.97  # weight of a gap one observation older (effective memory ~33 gaps)
GAP_SPREAD = (0.5, 0.75, 1.0, 1.5, 2.0)  # lengths each observed gap stands for (× the gap)
MIN_HISTORY = 2
NEAR_BUDGET = Decimal("0.9")
OVER_BUDGET = Decimal("1.0")
SHORT_TTL_SECONDS = 300


@dataclass(frozen=True)
class ReuseHistory:
    """The recent gaps between queries of one context (seconds, oldest first)."""

    gaps: tuple[float, ...] = ()
    last_query_at: float | None = None  # epoch seconds

    def observe(self, at: float) -> ReuseHistory:
        """The history after a query at ``at`` (epoch seconds; out-of-order is ignored)."""
        if self.last_query_at is None:
            return ReuseHistory(self.gaps, at)
        gap = at - self.last_query_at
        if gap < 0:
            return self
        return ReuseHistory((*self.gaps, round(gap, 3))[-GAP_MEMORY:], at)


def breakeven_gap_seconds(economics: CacheEconomics) -> float:
    """``G*``: the longest gap worth bridging with storage (inf when storage is free)."""
    saving = economics.miss_per_mtok - economics.hit_per_mtok
    if saving <= 0:
        return 0.0
    if economics.storage_per_mtok_hour <= 0:
        return math.inf
    return float(saving / economics.storage_per_mtok_hour * 3600)


def keep_alive_seconds(*, gaps: tuple[float, ...], breakeven_gap: float) -> float:
    """The ``k`` minimising the weighted cost of the observed gaps (see the section comment).

    (Conditioning on the kind of the latest gap, short or long, was measured too: no
    better on either trace, so the plain weighted history decides.)
    """
    if breakeven_gap <= 0:
        return 0.0
    if len(gaps) < MIN_HISTORY:
        return breakeven_gap
    if math.isinf(breakeven_gap):
        return max(gaps) * 2
    n = len(gaps)
    # Each observed gap stands for a spread of lengths around it (a kernel estimate of
    # the gap distribution, ``GAP_SPREAD``): on the raw sample the sweep puts ``k`` just
    # past the longest gap seen, and the first slightly longer one is a miss.
    weighted = sorted(
        (g * spread, GAP_DECAY ** (n - 1 - i) / len(GAP_SPREAD))
        for i, g in enumerate(gaps)
        for spread in GAP_SPREAD
    )
    total = sum(w for _, w in weighted)
    # Sweep k upwards through the sorted gaps: below k a gap costs its length, above it
    # costs k + G*. cost(k) = covered + (k + G*) * uncovered_weight.
    best_k, best, best_remaining = 0.0, total * breakeven_gap, total
    covered, remaining = 0.0, total
    for g, w in weighted:
        covered += g * w
        remaining -= w
        k = g * 1.05 + 1.0  # just past this gap (hit-flush lag and jitter)
        cost = covered + (k + breakeven_gap) * remaining
        if cost < best:
            best_k, best, best_remaining = k, cost, remaining
    if best_remaining <= total * 1e-9:
        # Every gap seen is worth bridging: the history says nothing about longer ones,
        # and bridging any gap up to G* never costs more than the miss it avoids.
        return max(best_k, breakeven_gap)
    return best_k


@dataclass(frozen=True)
class AutopilotDecision:
    """What the autopilot wants for one cache now (all times epoch seconds).

    ``action``: ``extend``/``shorten`` (set the expiry to ``expire_at``), ``keep`` (the
    current expiry is right), ``expire`` (let it run out or drop it), ``refuse`` (do not
    create it). ``next_review_at``: when to look again without new hits.
    """

    action: str
    expire_at: float
    keep_alive_seconds: float
    allow_new_pins: bool
    next_review_at: float | None
    reason: str

    def ttl_from(self, now: float) -> int:
        """The TTL to send a provider whose update sets ``expiry = now + ttl``."""
        # A millisecond of float noise (epoch seconds) must not add a whole second.
        return max(int(math.ceil(self.expire_at - now - 1e-3)), 0)


def autopilot_decide(
    *,
    history: ReuseHistory,
    economics: CacheEconomics,
    now: float,
    expire_at: float | None,
    budget_used_fraction: Decimal | float = 0,
    min_ttl_seconds: int = 60,
    review_lead_seconds: float = 30.0,
    slack_seconds: float = 15.0,
) -> AutopilotDecision:
    """The one decision function of the economic TTL policy (app and benchmark).

    ``expire_at`` None: the cache does not exist (a creation is being considered).
    Budget coupling: at ``NEAR_BUDGET`` of a budget, keep-alives are capped at
    ``SHORT_TTL_SECONDS``, no review extends a cache (refreshes stop) and new pins are
    refused; at ``OVER_BUDGET`` live caches are dropped at the next review point.
    """
    used = _dec(budget_used_fraction)
    gap_star = breakeven_gap_seconds(economics)
    k = keep_alive_seconds(gaps=history.gaps, breakeven_gap=gap_star)
    near, over = used >= NEAR_BUDGET, used >= OVER_BUDGET
    if near:
        k = min(k, SHORT_TTL_SECONDS)
    last = history.last_query_at if history.last_query_at is not None else now
    target = max(last + k, now + min_ttl_seconds) if k > 0 else now + min_ttl_seconds
    if expire_at is None:
        if near:
            return AutopilotDecision(
                REFUSE, now, k, False, None, f"budget {used:.0%} used: no new pins"
            )
        return AutopilotDecision(
            EXTEND,
            target,
            k,
            True,
            max(target - review_lead_seconds, now),
            f"create: keep {k:.0f}s after each query (break-even gap {gap_star:.0f}s)",
        )
    if over:
        return AutopilotDecision(
            EXPIRE, min(expire_at, now + min_ttl_seconds), k, False, None, "over budget"
        )
    wanted = last + k
    if k <= 0 or wanted <= now:
        return AutopilotDecision(
            EXPIRE, expire_at, k, not near, None, "the learned keep-alive has passed"
        )
    if near and wanted > expire_at:
        # Refreshes stop near the limit; only a shortening is still applied.
        return AutopilotDecision(EXPIRE, expire_at, k, False, None, "near budget: no refresh")
    # On target when the wanted expiry is the current one, or when the only move would
    # be a shortening the provider's minimum TTL does not allow. (Comparing ``target``
    # instead extended every cache by up to ``min_ttl - review_lead`` at the review
    # before its expiry: storage the rule never asked for, at the end of every burst.)
    on_target = abs(wanted - expire_at) <= slack_seconds or (
        wanted < expire_at and target >= expire_at - slack_seconds
    )
    if on_target:
        if expire_at - now <= review_lead_seconds:
            return AutopilotDecision(EXPIRE, expire_at, k, not near, None, "on target: runs out")
        return AutopilotDecision(
            KEEP, expire_at, k, not near, max(expire_at - review_lead_seconds, now), "on target"
        )
    action = EXTEND if target > expire_at else SHORTEN
    return AutopilotDecision(
        action,
        target,
        k,
        not near,
        max(target - review_lead_seconds, now),
        f"{action} to last query + {k:.0f}s",
    )


def autopilot_creation_decide(
    *,
    history: ReuseHistory,
    economics: CacheEconomics,
    now: float,
    budget_used_fraction: Decimal | float = 0,
) -> AutopilotDecision:
    """The decision for a cache about to be created (app: ``cache_autopilot_creation_ttl``).

    ``history``: what was learned about the content before this creation (the creation
    itself is learned once the cache exists). ``refuse`` near a budget; otherwise create
    it with ``ttl_from(now)``: the learned keep-alive, at least the minimum TTL, never
    the TTL the cache was requested with.
    """
    return autopilot_decide(
        history=history,
        economics=economics,
        now=now,
        expire_at=None,
        budget_used_fraction=budget_used_fraction,
    )


def autopilot_review_ttl(
    decision: AutopilotDecision, *, now: float, expire_at: float | None
) -> int | None:
    """The TTL a review refreshes the cache with, or None to leave its expiry alone
    (then look again at ``decision.next_review_at``, or never when that is None).

    A refresh when the decision moves the expiry (``extend``/``shorten``), or when
    ``expire`` drops the cache before its current expiry (over budget).
    """
    moves = decision.action in (EXTEND, SHORTEN) or (
        decision.action == EXPIRE and expire_at is not None and decision.expire_at < expire_at - 1
    )
    ttl = decision.ttl_from(now)
    return ttl if moves and ttl > 0 else None
