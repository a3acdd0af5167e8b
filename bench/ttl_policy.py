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

- ``autopilot``: the app's own functions at the app's points (``cost_autopilot``):
  ``autopilot_creation_decide`` at creation (the TTL the app creates with), the hit flush
  (every ``--flush`` seconds) and reviews (``autopilot_decide`` + ``autopilot_review_ttl``,
  ``review_lead`` seconds before each expiry and at once after a creation or refresh);
  history kept per context across re-creations, as ``billing.models.TtlProfile`` does;
- ``breakeven``: the plain rent-or-buy rule (keep ``G*`` after each query);
- ``fixed_*``: sliding fixed TTLs (every query keeps the cache the TTL longer);
- ``oracle_keepalive``: each cache's best fixed keep-alive chosen with hindsight (context).

Pure Python, no database. Ends with one ``RESULT`` line (``economic=`` is the autopilot).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ttl_traces import DAY, HOUR, Cache, make_trace, make_trace_previous
from billing.ttl_policy import (
    EXTEND,
    REFUSE,
    SHORTEN,
    AutopilotDecision,
    ReuseHistory,
    autopilot_creation_decide,
    autopilot_decide,
    autopilot_review_ttl,
    breakeven_gap_seconds,
)

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
    """The app's loop, through the app's own two functions (no database: the history, the
    prices and the budget are what the app would read from it):

    - a query with no live cache creates one (``caches.services.execution`` via
      ``cache_autopilot_creation_ttl``): ``autopilot_creation_decide`` on the history known
      before it, created for ``ttl_from(now)`` (refused: the query is not learned); the
      creation is learned (``creation_book``) and the cache reviewed at once
      (``next_refresh_time``);
    - the hit flush (every ``flush`` s) learns the hits and asks for a review when the
      decision moves the expiry (``cache_autopilot_on_hits``);
    - a review (``caches.services.scheduling._autopilot_review``) refreshes with
      ``autopilot_review_ttl`` (then reviews again at once, as after every refresh) or
      waits until ``next_review_at``.
    """
    history = ReuseHistory()
    expire: float | None = None
    review: float | None = None
    alive_from = 0.0
    total = 0.0

    def decide(now: float, exp: float) -> AutopilotDecision:
        return autopilot_decide(
            history=history,
            economics=c.economics,
            now=now,
            expire_at=exp,
            budget_used_fraction=budget_used,
            review_lead_seconds=review_lead,
        )

    def review_now(now: float, first: AutopilotDecision | None = None) -> None:
        nonlocal expire, review
        for _ in range(3):  # a refresh is reviewed again at once; it settles on target
            assert expire is not None
            d = first or decide(now, expire)  # (the hit flush's decision, not asked twice)
            first = None
            ttl = autopilot_review_ttl(d, now=now, expire_at=expire)
            if ttl is None:
                review = d.next_review_at
                return
            expire = now + ttl
        review = None

    def run_reviews(until: float) -> None:
        nonlocal expire, review, total
        while expire is not None:
            if review is not None and review < expire and review <= until:
                review_now(review)
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
                if d.action in (EXTEND, SHORTEN):
                    review_now(seen, d)
            continue
        total += c.miss
        d = autopilot_creation_decide(
            history=history, economics=c.economics, now=t, budget_used_fraction=budget_used
        )
        if d.action == REFUSE:
            continue
        expire, alive_from = t + d.ttl_from(t), t
        history = history.observe(t)
        review_now(t)
    run_reviews(math.inf)
    return total


def evaluate(trace: list[Cache], *, flush: float, review_lead: float) -> dict[str, Any]:
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
