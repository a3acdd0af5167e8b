"""Benchmark: the economic TTL policy against fixed TTLs and the hindsight optimum.

    .venv/bin/python bench/ttl_policy.py [--caches 400] [--hours 72] [--seed 7]

A synthetic trace (seeded): each cache has a long-tailed base query rate (Pareto), a
diurnal cycle (business hours peak, per-cache phase) and bursts (an on/off Markov
process multiplying the rate while "on"). Cost model per cache, context tokens only (the
suffix and output cost the same under every policy): a query that finds the cache alive
pays the cached-read price, otherwise the input price (and leaves the context cached,
as a vLLM prefill or an implicit/Anthropic-style write does); a live cache pays storage
per token-hour. Prices: Gemini 2.5 Pro and 2.5 Flash from the price book seed.

Policies: no cache (baseline), sliding fixed TTLs of 5 min, 1 h and 24 h, the economic
policy (``billing.ttl_policy``: EWMA rate, extend while expected savings over the next
window exceed storage, re-evaluated at every expiry), and the offline optimum: with
hindsight, keep the cache across a gap between two queries iff storing it for the gap
costs less than the miss it avoids (decisions per gap are independent in this model, so
this is exact). Savings are reported as a fraction of the optimum's savings.

Pure Python, no database. Ends with one ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from billing.ttl_policy import (
    EXTEND,
    CacheEconomics,
    ewma_decay,
    ewma_update,
    ttl_decision,
)

MODELS = {
    # input, cached read, storage per 1M tokens per hour (USD), from the price book seed.
    "gemini-2.5-pro": (1.25, 0.125, 4.50),
    "gemini-2.5-flash": (0.30, 0.03, 1.00),
}
HOUR = 3600.0


@dataclass
class Cache:
    kind: str
    model: str
    tokens: int
    times: list[float]

    @property
    def miss(self) -> float:  # USD per query
        return self.tokens * MODELS[self.model][0] / 1e6

    @property
    def hit(self) -> float:
        return self.tokens * MODELS[self.model][1] / 1e6

    @property
    def storage_per_second(self) -> float:
        return self.tokens * MODELS[self.model][2] / 1e6 / HOUR


def _sessions(rng, horizon, per_hour, phase, length, gap_mean, out) -> None:
    """Diurnal session arrivals (by thinning); each session is a run of close queries."""
    peak = per_hour * 1.8 / HOUR
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= horizon:
            return
        if rng.random() < (1 + 0.8 * math.sin(2 * math.pi * (t / HOUR - phase) / 24)) / 1.8:
            at = t
            for _ in range(length()):
                if at >= horizon:
                    break
                out.append(at)
                at += rng.expovariate(1 / gap_mean)


def make_trace(*, caches: int, hours: float, seed: int) -> list[Cache]:
    """The three workloads of DOMAIN.md, each with long-tailed per-cache popularity
    (Pareto) and a diurnal cycle with a per-cache phase:

    - coding agents (20 %): sessions of ~25 calls (lognormal) a few seconds apart over
      20k-200k-token repositories;
    - support agents (40 %): conversations of 1 + ~5 turns 20-120 s apart over a
      per-customer knowledge base of 8k-60k tokens;
    - document Q&A (40 %): mostly isolated questions over 100k-250k-token corpora, plus
      occasional review sessions of 5-20 questions minutes apart.
    """
    rng = random.Random(seed)
    horizon = hours * HOUR
    out = []
    for _ in range(caches):
        kind = rng.choices(("agent", "support", "docqa"), weights=(2, 4, 4))[0]
        phase, times = rng.uniform(0, 24), []
        if kind == "agent":
            tokens = int(rng.uniform(20_000, 200_000))
            _sessions(
                rng,
                horizon,
                min(0.03 * rng.paretovariate(1.2), 6),
                phase,
                lambda: int(rng.lognormvariate(math.log(25), 0.8)) + 1,
                rng.uniform(3, 30),
                times,
            )
        elif kind == "support":
            tokens = int(rng.uniform(8_000, 60_000))
            _sessions(
                rng,
                horizon,
                min(0.1 * rng.paretovariate(1.2), 30),
                phase,
                lambda: 1 + int(rng.expovariate(1 / 5)),
                rng.uniform(20, 120),
                times,
            )
        else:
            tokens = int(rng.uniform(100_000, 250_000))
            _sessions(
                rng, horizon, min(0.2 * rng.paretovariate(1.1), 60), phase, lambda: 1, 1.0, times
            )
            _sessions(
                rng,
                horizon,
                min(0.02 * rng.paretovariate(1.2), 2),
                phase,
                lambda: int(rng.uniform(5, 20)),
                rng.uniform(60, 300),
                times,
            )
        times.sort()
        if times:
            out.append(Cache(kind, rng.choice(tuple(MODELS)), tokens, times))
    return out


def cost_no_cache(c: Cache) -> float:
    return len(c.times) * c.miss


def cost_fixed(c: Cache, ttl: float) -> float:
    """Sliding TTL: every query (hit or miss) keeps the context for ``ttl`` more seconds."""
    total, expire, last = 0.0, -1.0, None
    for t in c.times:
        if last is not None:
            total += (min(t, expire) - last) * c.storage_per_second
        total += c.hit if t < expire else c.miss
        expire, last = t + ttl, t
    return total + ttl * c.storage_per_second  # the last window runs out unused


def cost_optimum(c: Cache) -> float:
    total = c.miss
    for prev, t in zip(c.times, c.times[1:], strict=False):
        total += min((t - prev) * c.storage_per_second + c.hit, c.miss)
    return total


def cost_timeout(c: Cache, keep: float) -> float:
    """Keep the context ``keep`` seconds after each query (what a per-cache oracle tunes)."""
    if keep <= 0:
        return cost_no_cache(c)
    total = c.miss
    for prev, t in zip(c.times, c.times[1:], strict=False):
        gap = t - prev
        if gap < keep:
            total += gap * c.storage_per_second + c.hit
        else:
            total += keep * c.storage_per_second + c.miss
    return total + keep * c.storage_per_second


ORACLE_GRID = (0, 15, 30, 60, 90, 120, 180, 240, 300, 450, 600, 900, 1200, 1800, 3600)


def cost_economic(c: Cache, *, window: float, tau: float, margin: Decimal) -> float:
    """The policy as the caches app runs it: decide after each query and at each expiry."""
    price = MODELS[c.model]
    econ = CacheEconomics(
        tokens=c.tokens,
        miss_per_mtok=Decimal(repr(price[0])),
        hit_per_mtok=Decimal(repr(price[1])),
        storage_per_mtok_hour=Decimal(repr(price[2])),
    )
    rate, last_hit = 0.0, None
    alive_until = -1.0  # the cache exists on [created, alive_until)
    total = 0.0
    alive_from = None
    for i, t in enumerate(c.times):
        # Checkpoints at each expiry before this query: extend by one window or drop.
        while alive_from is not None and alive_until <= t:
            current = ewma_decay(
                rate_per_hour=rate, last_at=last_hit, now=alive_until, tau_seconds=tau
            )
            decision = ttl_decision(
                rate_per_hour=current,
                economics=econ,
                remaining_ttl_seconds=0,
                window_seconds=int(window),
                margin=margin,
                idle_seconds=alive_until - last_hit,
            )
            if decision.action == EXTEND:
                alive_until += decision.ttl_seconds
            else:
                total += (alive_until - alive_from) * c.storage_per_second
                alive_from = None
        hit = alive_from is not None and t < alive_until
        total += c.hit if hit else c.miss
        rate = ewma_update(rate_per_hour=rate, last_at=last_hit, now=t, tau_seconds=tau)
        last_hit = t
        remaining = int(alive_until - t) if hit else 0
        decision = ttl_decision(
            rate_per_hour=rate,
            economics=econ,
            remaining_ttl_seconds=remaining,
            window_seconds=int(window),
            margin=margin,
        )
        if decision.action == EXTEND:
            if alive_from is None:
                alive_from = t
            alive_until = t + decision.ttl_seconds
        elif not hit:
            alive_from = None  # not worth keeping: the miss's context is not retained
        if i == len(c.times) - 1 and alive_from is not None:
            # Run the remaining checkpoints out after the last query.
            while True:
                current = ewma_decay(
                    rate_per_hour=rate, last_at=last_hit, now=alive_until, tau_seconds=tau
                )
                decision = ttl_decision(
                    rate_per_hour=current,
                    economics=econ,
                    remaining_ttl_seconds=0,
                    window_seconds=int(window),
                    margin=margin,
                    idle_seconds=alive_until - last_hit,
                )
                if decision.action != EXTEND:
                    break
                alive_until += decision.ttl_seconds
            total += (alive_until - alive_from) * c.storage_per_second
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caches", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=72)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--window", type=float, default=60, help="re-evaluation window, s")
    parser.add_argument("--tau", type=float, default=900, help="EWMA time constant, s")
    args = parser.parse_args()

    started = time.perf_counter()
    trace = make_trace(caches=args.caches, hours=args.hours, seed=args.seed)
    queries = sum(len(c.times) for c in trace)
    policies = {
        "fixed_5m": lambda c: cost_fixed(c, 300),
        "fixed_1h": lambda c: cost_fixed(c, HOUR),
        "fixed_24h": lambda c: cost_fixed(c, 24 * HOUR),
        "economic": lambda c: cost_economic(c, window=args.window, tau=args.tau, margin=Decimal(1)),
        # Context, not a contender: each cache's best keep-alive chosen with hindsight.
        "oracle_keepalive": lambda c: min(cost_timeout(c, k) for k in ORACLE_GRID),
        "optimum": cost_optimum,
    }
    per_cache = {name: [policy(c) for c in trace] for name, policy in policies.items()}
    no_cache = [cost_no_cache(c) for c in trace]
    baseline = sum(no_cache)

    def fraction(costs: list[float], kind: str | None = None) -> float:
        pick = [i for i, c in enumerate(trace) if kind is None or c.kind == kind]
        saved = sum(no_cache[i] - costs[i] for i in pick)
        best = sum(no_cache[i] - per_cache["optimum"][i] for i in pick)
        return saved / best if best else 0.0

    kinds = ("agent", "support", "docqa")
    counts = {k: sum(1 for c in trace if c.kind == k) for k in kinds}
    print(
        f"trace: {len(trace)} caches ({', '.join(f'{counts[k]} {k}' for k in kinds)}), "
        f"{queries} queries over {args.hours:.0f} h, seed {args.seed}"
    )
    print(
        f"{'policy':<17} {'cost USD':>11} {'saved USD':>11} {'of optimum':>11}  "
        + "  ".join(f"{k:>7}" for k in kinds)
    )
    print(f"{'no_cache':<17} {baseline:>11.2f} {0:>11.2f} {0:>11.3f}")
    fractions = {}
    for name, costs in per_cache.items():
        fractions[name] = fraction(costs)
        by_kind = "  ".join(f"{fraction(costs, k):>7.3f}" for k in kinds)
        print(
            f"{name:<17} {sum(costs):>11.2f} {baseline - sum(costs):>11.2f} "
            f"{fractions[name]:>11.3f}  {by_kind}"
        )
    best_fixed = max(fractions[k] for k in ("fixed_5m", "fixed_1h", "fixed_24h"))
    ratio = fractions["economic"] / best_fixed if best_fixed > 0 else float("inf")
    print(f"economic vs the best fixed TTL (baseline): {ratio:.2f}x the savings")
    print(f"elapsed {time.perf_counter() - started:.1f} s")
    print(
        "RESULT "
        f"economic_fraction={fractions['economic']:.3f} "
        f"fixed_5m_fraction={fractions['fixed_5m']:.3f} "
        f"fixed_1h_fraction={fractions['fixed_1h']:.3f} "
        f"fixed_24h_fraction={fractions['fixed_24h']:.3f} "
        f"oracle_keepalive_fraction={fractions['oracle_keepalive']:.3f} "
        f"economic_vs_best_fixed={ratio:.2f} "
        f"queries={queries} target_0_9_met={str(fractions['economic'] >= 0.9).lower()}"
    )


if __name__ == "__main__":
    main()
