"""The traces ``bench/ttl_policy.py`` replays: seeded cache contexts and their query times.

``make_trace`` is the mixed week (steady, bursty, diurnal and stopping contexts; see the
benchmark's docstring), ``make_trace_previous`` the earlier benchmark's agents, support and
document Q&A. Each ``Cache`` carries its price-derived economics (the app's
``CacheEconomics``) and the float costs the policies are scored with.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from decimal import Decimal

from billing.pricing import TokenRates
from billing.ttl_policy import CacheEconomics

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
