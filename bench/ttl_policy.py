"""Benchmark: the economic TTL autopilot, run as the app runs it, against the hindsight optimum.

    .venv/bin/python bench/ttl_policy.py [--caches 240] [--days 7] [--seed 11[,1,2]]
        [--generator mixed|previous]

``--generator previous`` is the earlier benchmark's trace (agents, support, document Q&A);
with several seeds each gets its table and ``economic=`` is the worst of them.

The trace (seeded, one week) mixes four kinds of context, each with 5k-500k tokens
(log-uniform) on Gemini 2.5 Pro or 2.5 Flash (prices from ``billing.pricing`` tiers: a
Pro context above 200k tokens reads and misses at the long-tier rates):

- ``steady``: Poisson queries, 0.3-60 per hour (log-uniform);
- ``bursty``: sessions (Poisson, 0.05-3 per hour) of ~2-40 queries seconds to minutes
  apart;
- ``diurnal``: weekday business-hours traffic (per-cache time zone), a few queries per
  hour to a few hundred per hour at the peak, 3-10 % of it at night and at weekends;
- ``stopping``: steady or bursty use for 1-96 hours, then never again.

Cost model per context (the suffix and output cost the same under every policy): a query
that finds the cache alive pays the cached-read price, otherwise the input price (the
miss creates the cache again); a live cache pays storage per token-second.

Policies, as fractions of the savings the hindsight optimum achieves (keep across a gap
iff storing it costs less than the miss it avoids):

- ``autopilot``: ``billing.ttl_policy.autopilot_decide`` with the app's review points:
  creation with the decided TTL, the hit flush (every ``--flush`` seconds) extending the
  cache, a review ``review_lead`` seconds before each expiry; history kept per context
  across re-creations, as ``billing.models.TtlProfile`` does;
- ``breakeven``: the plain rent-or-buy rule (keep ``G*`` after each query);
- ``fixed_*``: sliding fixed TTLs (every query keeps the cache the TTL longer);
- ``oracle_keepalive``: each cache's best fixed keep-alive chosen with hindsight (context).

Pure Python, no database. Ends with one ``RESULT`` line (``economic=`` is the autopilot).
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

from billing.pricing import TokenRates
from billing.ttl_policy import (
    EXPIRE,
    REFUSE,
    CacheEconomics,
    ReuseHistory,
    autopilot_decide,
    breakeven_gap_seconds,
)

D = Decimal
HOUR, DAY = 3600.0, 86400.0
MODELS = {  # as seeded in the price book (billing.0002)
    "gemini-2.5-pro": TokenRates(
        input=D("1.25"),
        cached_input=D("0.125"),
        cache_write_5m=D("1.25"),
        cache_write_1h=D("1.25"),
        output=D("10"),
        storage_per_hour=D("4.50"),
        long_threshold=200_000,
        long_input=D("2.50"),
        long_cached_input=D("0.25"),
        long_output=D("15"),
    ),
    "gemini-2.5-flash": TokenRates(
        input=D("0.30"),
        cached_input=D("0.03"),
        cache_write_5m=D("0.30"),
        cache_write_1h=D("0.30"),
        output=D("2.50"),
        storage_per_hour=D("1.00"),
    ),
}
KINDS = ("steady", "bursty", "diurnal", "stopping")


@dataclass
class Cache:
    kind: str
    model: str
    tokens: int
    times: list[float]

    def __post_init__(self) -> None:
        rates = MODELS[self.model].for_prompt(self.tokens)
        self.economics = CacheEconomics(
            tokens=self.tokens,
            miss_per_mtok=rates.input,
            hit_per_mtok=rates.cached_input,
            storage_per_mtok_hour=rates.storage_per_hour,
        )
        self.miss = self.tokens * float(rates.input) / 1e6
        self.hit = self.tokens * float(rates.cached_input) / 1e6
        self.storage_per_second = self.tokens * float(rates.storage_per_hour) / 1e6 / HOUR


def _loguniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _poisson(rng, start, end, per_hour, out) -> None:
    t = start
    while True:
        t += rng.expovariate(per_hour / HOUR)
        if t >= end:
            return
        out.append(t)


def _sessions(rng, start, end, per_hour, mean_len, mean_gap, out) -> None:
    t = start
    while True:
        t += rng.expovariate(per_hour / HOUR)
        if t >= end:
            return
        at = t
        for _ in range(1 + int(rng.expovariate(1 / mean_len))):
            if at >= end:
                break
            out.append(at)
            at += rng.expovariate(1 / mean_gap)


def _diurnal(rng, end, peak_per_hour, night_share, offset_hours, out) -> None:
    """Thinning: weekdays 9-18 local at the peak rate, ramps around it, nights low."""
    t = 0.0
    while True:
        t += rng.expovariate(peak_per_hour / HOUR)
        if t >= end:
            return
        local = (t / HOUR + offset_hours) % 168
        day, hour = int(local // 24), local % 24
        if day >= 5:
            level = night_share
        elif 9 <= hour < 18:
            level = 1.0
        elif 7 <= hour < 9 or 18 <= hour < 21:
            level = 0.35
        else:
            level = night_share
        if rng.random() < level:
            out.append(t)


def make_trace(*, caches: int, days: float, seed: int) -> list[Cache]:
    rng = random.Random(seed)
    horizon = days * DAY
    out: list[Cache] = []
    for i in range(caches):
        kind = KINDS[i % len(KINDS)]
        model = rng.choice(tuple(MODELS))
        tokens = int(_loguniform(rng, 5_000, 500_000))
        times: list[float] = []
        if kind == "steady":
            _poisson(rng, 0, horizon, _loguniform(rng, 0.3, 60), times)
        elif kind == "bursty":
            _sessions(
                rng,
                0,
                horizon,
                _loguniform(rng, 0.05, 3),
                _loguniform(rng, 2, 40),
                _loguniform(rng, 3, 240),
                times,
            )
        elif kind == "diurnal":
            _diurnal(
                rng,
                horizon,
                _loguniform(rng, 3, 300),
                rng.uniform(0.03, 0.10),
                rng.uniform(-8, 8),
                times,
            )
        else:
            stop = _loguniform(rng, 1, 96) * HOUR
            if rng.random() < 0.5:
                _poisson(rng, 0, stop, _loguniform(rng, 2, 120), times)
            else:
                _sessions(rng, 0, stop, _loguniform(rng, 0.3, 4), 10, 30, times)
        times.sort()
        if len(times) >= 2:
            out.append(Cache(kind, model, tokens, times))
    return out


def _diurnal_sessions(rng, horizon, per_hour, phase, length, gap_mean, out) -> None:
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


def make_trace_previous(*, caches: int, days: float, seed: int) -> list[Cache]:
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
    horizon = days * DAY
    out = []
    for _ in range(caches):
        kind = rng.choices(("agent", "support", "docqa"), weights=(2, 4, 4))[0]
        phase, times = rng.uniform(0, 24), []
        if kind == "agent":
            tokens = int(rng.uniform(20_000, 200_000))
            _diurnal_sessions(
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
            _diurnal_sessions(
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
            _diurnal_sessions(
                rng, horizon, min(0.2 * rng.paretovariate(1.1), 60), phase, lambda: 1, 1.0, times
            )
            _diurnal_sessions(
                rng,
                horizon,
                min(0.02 * rng.paretovariate(1.2), 2),
                phase,
                lambda: int(rng.uniform(5, 20)),
                rng.uniform(60, 300),
                times,
            )
        times.sort()
        if len(times) >= 2:
            out.append(Cache(kind, rng.choice(tuple(MODELS)), tokens, times))
    return out


GENERATORS = {"mixed": make_trace, "previous": make_trace_previous}


def cost_no_cache(c: Cache) -> float:
    return len(c.times) * c.miss


def cost_optimum(c: Cache) -> float:
    total = c.miss
    for prev, t in zip(c.times, c.times[1:], strict=False):
        total += min((t - prev) * c.storage_per_second + c.hit, c.miss)
    return total


def cost_keepalive(c: Cache, keep: float) -> float:
    """Keep the context ``keep`` seconds after each query (sliding TTL / rent-or-buy)."""
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


ORACLE_GRID = tuple(60 * m for m in (1, 2, 3, 5, 8, 10, 15, 20, 30, 45, 60, 90, 120, 240, 480))


NO_BUDGET_USED = Decimal(0)


def cost_autopilot(
    c: Cache, *, flush: float, review_lead: float, budget_used: Decimal = NO_BUDGET_USED
) -> float:
    """The app's loop: create, extend on flushed hits, review before expiry."""
    history = ReuseHistory()
    expire: float | None = None
    review: float | None = None
    alive_from = 0.0
    total = 0.0

    def decide(now: float, exp: float | None):
        return autopilot_decide(
            history=history,
            economics=c.economics,
            now=now,
            expire_at=exp,
            budget_used_fraction=budget_used,
            review_lead_seconds=review_lead,
        )

    def run_reviews(until: float) -> None:
        nonlocal expire, review, total
        while expire is not None:
            if review is not None and review < expire and review <= until:
                d = decide(review, expire)
                if d.action == EXPIRE:
                    review = None
                    expire = min(expire, d.expire_at)
                else:
                    expire = max(d.expire_at, review)
                    review = d.next_review_at if d.next_review_at is not None else None
                continue
            if expire <= until:
                total += (expire - alive_from) * c.storage_per_second
                expire, review = None, None
            return

    for t in c.times:
        run_reviews(t)
        if expire is not None and t < expire:
            total += c.hit
            seen = math.ceil(t / flush) * flush  # the hit flush reports it a little later
            run_reviews(seen)
            history = history.observe(seen)
            if expire is not None:
                d = decide(seen, expire)
                if d.action != EXPIRE:
                    expire, review = d.expire_at, d.next_review_at
            continue
        total += c.miss
        history = history.observe(t)
        d = decide(t, None)
        if d.action == REFUSE:
            continue
        expire, review, alive_from = d.expire_at, d.next_review_at, t
    run_reviews(math.inf)
    return total


def evaluate(trace: list[Cache], *, flush: float, review_lead: float) -> dict:
    """Each policy's fraction of the optimum's savings, overall and per cache class."""
    policies = {
        "fixed_5m": lambda c: cost_keepalive(c, 300),
        "fixed_15m": lambda c: cost_keepalive(c, 900),
        "fixed_1h": lambda c: cost_keepalive(c, HOUR),
        "fixed_24h": lambda c: cost_keepalive(c, DAY),
        "breakeven": lambda c: cost_keepalive(c, breakeven_gap_seconds(c.economics)),
        "autopilot": lambda c: cost_autopilot(c, flush=flush, review_lead=review_lead),
        "oracle_keepalive": lambda c: min(cost_keepalive(c, k) for k in ORACLE_GRID),
        "optimum": cost_optimum,
    }
    per_cache = {name: [policy(c) for c in trace] for name, policy in policies.items()}
    no_cache = [cost_no_cache(c) for c in trace]
    kinds = tuple(dict.fromkeys(c.kind for c in trace))

    def fraction(name: str, kind: str | None = None) -> float:
        pick = [i for i, c in enumerate(trace) if kind is None or c.kind == kind]
        saved = sum(no_cache[i] - per_cache[name][i] for i in pick)
        best = sum(no_cache[i] - per_cache["optimum"][i] for i in pick)
        return saved / best if best else 0.0

    table = {name: {k: fraction(name, k) for k in (None, *kinds)} for name in policies}
    saved = {name: sum(no_cache) - sum(per_cache[name]) for name in policies}
    fixed = ("fixed_5m", "fixed_15m", "fixed_1h", "fixed_24h")
    margin = min(
        table["autopilot"][k] - max(table[p][k] for p in (*fixed, "breakeven")) for k in kinds
    )
    return {
        "kinds": kinds,
        "table": table,
        "saved": saved,
        "best_fixed": max(table[p][None] for p in fixed),
        "margin": margin,
        "queries": sum(len(c.times) for c in trace),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caches", type=int, default=240)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--seed", type=str, default="11", help="a seed or a comma list")
    parser.add_argument("--generator", choices=tuple(GENERATORS), default="mixed")
    parser.add_argument("--flush", type=float, default=5.0, help="hit flush interval, s")
    parser.add_argument("--review-lead", type=float, default=30.0, help="review before expiry")
    args = parser.parse_args()

    started = time.perf_counter()
    results = []
    for seed in (int(s) for s in args.seed.split(",")):
        trace = GENERATORS[args.generator](caches=args.caches, days=args.days, seed=seed)
        result = evaluate(trace, flush=args.flush, review_lead=args.review_lead)
        results.append(result)
        kinds = result["kinds"]
        counts = {k: sum(1 for c in trace if c.kind == k) for k in kinds}
        print(
            f"trace {args.generator}: {len(trace)} caches "
            f"({', '.join(f'{counts[k]} {k}' for k in kinds)}), "
            f"{result['queries']} queries over {args.days:g} days, seed {seed}"
        )
        header = "  ".join(f"{k:>8}" for k in kinds)
        print(f"{'policy':<17} {'saved USD':>10} {'of optimum':>11}  {header}")
        for name, row in result["table"].items():
            by_kind = "  ".join(f"{row[k]:>8.3f}" for k in kinds)
            print(f"{name:<17} {result['saved'][name]:>10.2f} {row[None]:>11.3f}  {by_kind}")
        print(
            f"seed {seed}: economic={result['table']['autopilot'][None]:.3f} "
            f"worst class margin vs fixed and break-even {result['margin']:+.3f}"
        )
    print(f"elapsed {time.perf_counter() - started:.1f} s")
    economic = [r["table"]["autopilot"][None] for r in results]
    first = results[0]
    kinds = first["kinds"]
    print(
        "RESULT "
        f"economic={min(economic):.3f} "
        + " ".join(
            f"economic_{k}={min(r['table']['autopilot'][k] for r in results):.3f}" for k in kinds
        )
        + f" breakeven={max(r['table']['breakeven'][None] for r in results):.3f} "
        f"best_fixed={max(r['best_fixed'] for r in results):.3f} "
        f"oracle_keepalive={max(r['table']['oracle_keepalive'][None] for r in results):.3f} "
        f"worst_class_margin_vs_fixed_and_breakeven={min(r['margin'] for r in results):+.3f} "
        f"seeds={len(results)} queries={sum(r['queries'] for r in results)} "
        f"target_0_95_met={str(min(economic) >= 0.95).lower()}"
    )


if __name__ == "__main__":
    main()
