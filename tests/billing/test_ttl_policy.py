"""The economic TTL policy (pure): EWMA rate estimate and the extend/expire/shorten rule."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.ttl_policy import (
    EXPIRE,
    EXTEND,
    SHORTEN,
    CacheEconomics,
    ewma_decay,
    ewma_update,
    pin_allowed,
    ttl_decision,
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


def test_a_cache_above_break_even_is_extended_by_the_window() -> None:
    decision = ttl_decision(
        rate_per_hour=5.0, economics=PRO, remaining_ttl_seconds=30, window_seconds=3600
    )
    assert (decision.action, decision.ttl_seconds, decision.allow_new_pins) == (EXTEND, 3600, True)
    # 5 hits × 100k × (1.25 − 0.125) = 562,500 µ$ saved against 450,000 µ$ of storage.
    assert decision.expected_savings_micros == Decimal("562500")
    assert decision.storage_cost_micros == Decimal("450000")


def test_a_cache_below_break_even_is_left_to_expire() -> None:
    decision = ttl_decision(rate_per_hour=3.9, economics=PRO, remaining_ttl_seconds=120)
    assert (decision.action, decision.ttl_seconds) == (EXPIRE, 120)
    assert PRO.breakeven_rate_per_hour() == 4
    exactly = ttl_decision(rate_per_hour=4.0, economics=PRO, remaining_ttl_seconds=0)
    assert exactly.action == EXPIRE  # savings must exceed storage, not equal it


def test_a_longer_remaining_ttl_is_never_shortened_by_an_extension() -> None:
    decision = ttl_decision(
        rate_per_hour=50.0, economics=PRO, remaining_ttl_seconds=7200, window_seconds=300
    )
    assert (decision.action, decision.ttl_seconds) == (EXTEND, 7200)


def test_idle_time_caps_the_rate_so_a_finished_burst_is_not_kept() -> None:
    # A burst left a high estimate, but nothing came for 20 minutes: at most 3 per hour.
    decision = ttl_decision(
        rate_per_hour=40.0, economics=PRO, remaining_ttl_seconds=0, idle_seconds=1200
    )
    assert decision.action == EXPIRE


def test_near_the_budget_ttls_are_shortened_and_new_pins_refused() -> None:
    decision = ttl_decision(
        rate_per_hour=100.0,
        economics=PRO,
        remaining_ttl_seconds=3600,
        budget_used_fraction=Decimal("0.93"),
    )
    assert (decision.action, decision.ttl_seconds, decision.allow_new_pins) == (SHORTEN, 300, False)
    short = ttl_decision(
        rate_per_hour=100.0, economics=PRO, remaining_ttl_seconds=60, budget_used_fraction=0.95
    )
    assert (short.action, short.ttl_seconds) == (EXPIRE, 60)
    assert pin_allowed(budget_used_fraction=Decimal("0.89"))
    assert not pin_allowed(budget_used_fraction=0.9)


def test_a_cache_whose_hits_save_nothing_always_expires() -> None:
    free = CacheEconomics(
        tokens=1_000,
        miss_per_mtok=Decimal(1),
        hit_per_mtok=Decimal(1),
        storage_per_mtok_hour=Decimal(0),
    )
    assert ttl_decision(rate_per_hour=1e6, economics=free, remaining_ttl_seconds=0).action == EXPIRE
    assert free.breakeven_rate_per_hour() == Decimal("Infinity")


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        ewma_update(rate_per_hour=1.0, last_at=None, now=0.0, tau_seconds=0)
    with pytest.raises(ValueError):
        ttl_decision(rate_per_hour=1.0, economics=PRO, remaining_ttl_seconds=0, window_seconds=0)


def test_the_module_imports_nothing_from_django() -> None:
    import subprocess
    import sys

    code = (
        "import sys, billing.ttl_policy; "
        "sys.exit(any(m.split('.')[0] == 'django' for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
