"""The policy applied to a cache object, as the caches app calls it (duck-typed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from billing.services import budget_create, budget_reserve
from billing.services.cache_economics import cache_should_extend, cache_ttl_decision
from billing.ttl_policy import EXPIRE, EXTEND, SHORTEN
from tests.billing.conftest import T0

pytestmark = pytest.mark.django_db


@dataclass
class FakeCache:
    tenant_id: object
    provider: str = "vertex"
    model: str = "gemini-2.5-pro"
    token_count: int | None = 100_000
    query_rate_ewma: float = 0.0
    last_hit_at: datetime | None = None
    expire_at: datetime | None = None
    ttl_seconds: int = 300


def test_a_busy_cache_is_extended_and_an_idle_one_is_not(tenant_a, price_book) -> None:
    busy = FakeCache(
        tenant_a.pk,
        query_rate_ewma=20.0,
        last_hit_at=T0 - timedelta(seconds=30),
        expire_at=T0 + timedelta(seconds=60),
    )
    assert cache_ttl_decision(cache=busy, now=T0).action == EXTEND
    assert cache_should_extend(cache=busy, now=T0)
    idle = FakeCache(tenant_a.pk, query_rate_ewma=20.0, last_hit_at=T0 - timedelta(hours=2))
    assert cache_ttl_decision(cache=idle, now=T0).action == EXPIRE


def test_an_unpriced_cache_falls_back_to_recent_use(tenant_a, price_book) -> None:
    unknown = FakeCache(
        tenant_a.pk, model="gemini-9", query_rate_ewma=1.0, last_hit_at=T0 - timedelta(seconds=10)
    )
    assert cache_ttl_decision(cache=unknown, now=T0) is None
    assert cache_should_extend(cache=unknown, now=T0)


def test_near_the_budget_ttls_shorten(tenant_a, admin_a, actor, price_book) -> None:
    from django.utils import timezone

    now = timezone.now()
    budget_create(actor=actor, tenant=tenant_a, name="m", period="month", limit_micros=100)
    budget_reserve(tenant=tenant_a, principal=admin_a, estimate_micros=95, request_id="r")
    busy = FakeCache(
        tenant_a.pk, query_rate_ewma=50.0, last_hit_at=now, expire_at=now + timedelta(hours=1)
    )
    decision = cache_ttl_decision(cache=busy, now=now)
    assert (decision.action, decision.allow_new_pins) == (SHORTEN, False)
