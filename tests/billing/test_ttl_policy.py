"""The economic TTL policy (pure): the EWMA rate estimate and the autopilot."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.ttl_policy import (
    EXPIRE,
    CacheEconomics,
    ewma_decay,
    ewma_update,
)

PRO = CacheEconomics(  # gemini-2.5-pro, 100k tokens: break-even 4 queries per hour
    tokens=100_000,
    miss_per_mtok=Decimal("1.25"),
    hit_per_mtok=Decimal("0.125"),
    storage_per_mtok_hour=Decimal("4.50"),
)


def test_ewma_update_decays_the_old_rate_and_adds_one_over_tau() -> None:
    rate = ewma_update(rate_per_hour=0.0, last_at=None, now=0.0, tau_seconds=900)
    assert rate == 4.0  # one hit adds 3600/900 per hour
    later = ewma_update(rate_per_hour=rate, last_at=0.0, now=900.0, tau_seconds=900)
    assert later == pytest.approx(4.0 * math.exp(-1) + 4.0)
    at = datetime(2026, 3, 2, tzinfo=UTC)
    with_datetimes = ewma_update(
        rate_per_hour=rate, last_at=at, now=at + timedelta(seconds=900), tau_seconds=900
    )
    assert with_datetimes == pytest.approx(later)


def test_ewma_converges_to_the_true_rate_of_a_steady_stream() -> None:
    rng, t, rate, last = random.Random(3), 0.0, 0.0, None
    for _ in range(20_000):
        t += rng.expovariate(30 / 3600)  # 30 queries per hour
        rate = ewma_update(rate_per_hour=rate, last_at=last, now=t, tau_seconds=3600)
        last = t
    assert 24 < rate < 36


def test_ewma_decay_without_hits() -> None:
    assert ewma_decay(rate_per_hour=10.0, last_at=0.0, now=900.0, tau_seconds=900) == pytest.approx(
        10 / math.e
    )
    assert ewma_decay(rate_per_hour=10.0, last_at=None, now=5.0) == 10.0
    with pytest.raises(TypeError):
        ewma_decay(rate_per_hour=1.0, last_at=datetime.now(UTC), now=5.0)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        ewma_update(rate_per_hour=1.0, last_at=None, now=0.0, tau_seconds=0)


def test_the_module_imports_nothing_from_django() -> None:
    import subprocess
    import sys

    code = (
        "import sys, billing.ttl_policy; "
        "sys.exit(any(m.split('.')[0] == 'django' for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- The autopilot (billing.ttl_policy.autopilot_decide) --------------------------------


def test_the_keep_alive_bridges_short_gaps_and_drops_before_long_ones() -> None:
    from billing.ttl_policy import breakeven_gap_seconds, keep_alive_seconds

    gap_star = breakeven_gap_seconds(PRO)
    assert gap_star == 900.0  # (1.25 - 0.125) / 4.50 h
    # No history: the rent-or-buy rule. Sessions: bridge the 100 s gaps only; each one
    # stands for 50-200 s (GAP_SPREAD), so k = 200 × 1.05 + 1 = 211 s. Covering them all
    # costs (50 + 75 + 100 + 150 + 200) / 5 = 115 s a short gap plus 211 s + G* a long
    # one, 1,226 s a pair; k = 150 × 1.05 + 1 leaves a fifth of them to miss: 1,345 s.
    assert keep_alive_seconds(gaps=(), breakeven_gap=gap_star) == 900.0
    assert keep_alive_seconds(gaps=(100.0, 5_000.0) * 10, breakeven_gap=gap_star) == 211.0
    # Every gap worth bridging: at least G* (the history says nothing about longer gaps).
    assert keep_alive_seconds(gaps=(60.0,) * 20, breakeven_gap=gap_star) == 900.0
    # Only long gaps: keep nothing.
    assert keep_alive_seconds(gaps=(7_200.0,) * 20, breakeven_gap=gap_star) == 0.0


def test_the_history_is_bounded_and_ignores_out_of_order_queries() -> None:
    from billing.ttl_policy import GAP_MEMORY, ReuseHistory

    history = ReuseHistory()
    for t in range(200):
        history = history.observe(float(t * 10))
    assert len(history.gaps) == GAP_MEMORY and history.last_query_at == 1_990.0
    assert history.observe(5.0) == history


def test_the_autopilot_refuses_new_pins_near_a_budget_and_drops_caches_over_it() -> None:
    from billing.ttl_policy import REFUSE, ReuseHistory, autopilot_decide

    history = ReuseHistory((60.0,) * 20, 1_000.0)
    near = autopilot_decide(
        history=history, economics=PRO, now=1_000.0, expire_at=None, budget_used_fraction=0.9
    )
    assert near.action == REFUSE and not near.allow_new_pins
    over = autopilot_decide(
        history=history, economics=PRO, now=1_000.0, expire_at=5_000.0, budget_used_fraction=1
    )
    assert over.action == EXPIRE and over.expire_at == 1_060.0


def test_a_cache_on_target_runs_out_at_its_last_review_instead_of_being_stretched() -> None:
    from billing.ttl_policy import ReuseHistory, autopilot_decide

    # Gaps of 100 s and 5,000 s: k = 211 s; last query at 1,000 s, so the cache is on
    # target expiring at 1,211 s. At the review 30 s before (1,181 s) the provider's 60 s
    # minimum TTL would stretch it to 1,241 s: 30 s of storage nobody asked for.
    history = ReuseHistory((100.0, 5_000.0) * 10, 1_000.0)
    last = autopilot_decide(history=history, economics=PRO, now=1_181.0, expire_at=1_211.0)
    assert (last.action, last.expire_at, last.next_review_at) == (EXPIRE, 1_211.0, None)
    # Earlier it is kept as it is and looked at again 30 s before it expires.
    early = autopilot_decide(history=history, economics=PRO, now=1_010.0, expire_at=1_211.0)
    assert (early.action, early.next_review_at) == ("keep", 1_181.0)


def test_a_creation_is_decided_from_what_was_known_before_it() -> None:
    from billing.ttl_policy import EXTEND, ReuseHistory, autopilot_creation_decide

    # Sessions of 100 s gaps with 5,000 s between them: k = 211 s. The content was last
    # used at 1,000 s; a creation at 9,000 s gets the minimum TTL (the review right after
    # the creation, once the creation is learned, extends it to 9,000 + k).
    history = ReuseHistory((100.0, 5_000.0) * 10, 1_000.0)
    decision = autopilot_creation_decide(history=history, economics=PRO, now=9_000.0)
    assert decision.action == EXTEND and decision.ttl_from(9_000.0) == 60
    fresh = autopilot_creation_decide(history=ReuseHistory(), economics=PRO, now=0.0)
    assert fresh.ttl_from(0.0) == 900  # new content: the break-even gap
    near = autopilot_creation_decide(
        history=history, economics=PRO, now=9_000.0, budget_used_fraction=Decimal("0.95")
    )
    assert near.action == "refuse"


def test_a_review_refreshes_only_when_the_decision_moves_the_expiry() -> None:
    from billing.ttl_policy import ReuseHistory, autopilot_decide, autopilot_review_ttl

    history = ReuseHistory((100.0, 5_000.0) * 10, 1_000.0)  # k = 211 s: wanted 1,211 s

    def review(now: float, expire_at: float, used: float = 0) -> int | None:
        d = autopilot_decide(
            history=history,
            economics=PRO,
            now=now,
            expire_at=expire_at,
            budget_used_fraction=used,
        )
        return autopilot_review_ttl(d, now=now, expire_at=expire_at)

    assert review(1_010.0, 1_100.0) == 201  # extended to 1,211 s
    assert review(1_010.0, 3_000.0) == 201  # shortened
    assert review(1_010.0, 1_211.0) is None  # on target: kept, looked at again later
    assert review(1_300.0, 1_350.0) is None  # the keep-alive has passed: runs out
    assert review(1_010.0, 3_000.0, used=1) == 60  # over budget: dropped a minute from now


def test_the_benchmark_runs_the_apps_decision_function_and_beats_the_breakeven_rule() -> None:
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "ttl_policy.py"
    spec = importlib.util.spec_from_file_location("bench_ttl_policy", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)

    policy = __import__("billing.ttl_policy").ttl_policy
    assert bench.autopilot_decide is policy.autopilot_decide
    assert bench.autopilot_creation_decide is policy.autopilot_creation_decide
    assert bench.autopilot_review_ttl is policy.autopilot_review_ttl
    trace = bench.make_trace(caches=8, days=2, seed=3)
    no_cache = sum(bench.cost_no_cache(c) for c in trace)
    optimum = no_cache - sum(bench.cost_optimum(c) for c in trace)
    auto = no_cache - sum(bench.cost_autopilot(c, flush=5, review_lead=30) for c in trace)
    rule = no_cache - sum(
        bench.cost_keepalive(c, bench.breakeven_gap_seconds(c.economics)) for c in trace
    )
    assert auto / optimum >= 0.9 and auto >= rule * 0.99
