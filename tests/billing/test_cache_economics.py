"""The autopilot applied to a cache object, as the caches app calls it (duck-typed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from billing.models import TtlProfile
from billing.services import budget_create, budget_reserve
from billing.services.cache_economics import cache_autopilot_creation_ttl
from billing.ttl_policy import EXTEND, REFUSE
from tests.billing.conftest import T0

pytestmark = pytest.mark.django_db


@dataclass
class FakeCache:
    tenant_id: object
    provider: str = "vertex"
    model: str = "gemini-2.5-flash"
    token_count: int | None = None
    content_digest: str = "d" * 64
    expire_at: datetime | None = None


def _learn(cache: FakeCache, gaps: list[float], last: datetime) -> None:
    TtlProfile.objects.create(
        tenant_id=cache.tenant_id,
        provider=cache.provider,
        model=cache.model,
        content_digest=cache.content_digest,
        gaps_seconds=gaps,
        last_query_at=last,
        queries=len(gaps) + 1,
    )


def test_content_reused_only_after_long_gaps_is_created_for_the_minimum_ttl(
    tenant_a, price_book
) -> None:
    cache = FakeCache(tenant_a.pk)
    # Flash: break-even gap (0.30 - 0.03) / 1.00 per hour = 972 s; every gap was 10 h.
    _learn(cache, [36_000.0] * 8, T0 - timedelta(hours=10))
    decision = cache_autopilot_creation_ttl(cache=cache, now=T0, token_estimate=100_000)
    assert decision.action == EXTEND and decision.keep_alive_seconds == 0
    assert decision.ttl_from(T0.timestamp()) == 60


def test_content_reused_every_few_minutes_is_created_for_its_keep_alive(
    tenant_a, price_book
) -> None:
    cache = FakeCache(tenant_a.pk)
    _learn(cache, [36_000.0] + [300.0] * 7, T0)  # sessions of short gaps
    decision = cache_autopilot_creation_ttl(cache=cache, now=T0, token_estimate=100_000)
    assert 300 < decision.ttl_from(T0.timestamp()) < 972


def test_new_content_is_created_for_the_break_even_gap(tenant_a, price_book) -> None:
    decision = cache_autopilot_creation_ttl(
        cache=FakeCache(tenant_a.pk), now=T0, token_estimate=100_000
    )
    assert decision.ttl_from(T0.timestamp()) == 972


def test_near_the_budget_a_new_cache_is_refused(tenant_a, admin_a, actor, price_book) -> None:
    from django.utils import timezone

    now = timezone.now()
    budget_create(actor=actor, tenant=tenant_a, name="m", period="month", limit_micros=100)
    budget_reserve(tenant=tenant_a, principal=admin_a, estimate_micros=95, request_id="r")
    decision = cache_autopilot_creation_ttl(
        cache=FakeCache(tenant_a.pk), now=now, token_estimate=100_000
    )
    assert decision.action == REFUSE


def test_an_unpriced_model_has_no_economic_answer(tenant_a, price_book) -> None:
    unknown = FakeCache(tenant_a.pk, model="gemini-9")
    assert cache_autopilot_creation_ttl(cache=unknown, now=T0, token_estimate=100_000) is None


def test_the_app_creates_through_the_function_the_benchmark_replays(
    tenant_a, price_book, monkeypatch
) -> None:
    from billing import ttl_policy

    calls = []
    real = ttl_policy.autopilot_creation_decide

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(ttl_policy, "autopilot_creation_decide", spy)
    decision = cache_autopilot_creation_ttl(
        cache=FakeCache(tenant_a.pk), now=T0, token_estimate=100_000
    )
    assert len(calls) == 1 and decision.ttl_from(T0.timestamp()) == 972
