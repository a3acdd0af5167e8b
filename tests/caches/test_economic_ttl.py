"""Economic caches are created with the autopilot's TTL (the app asks it at creation)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import TtlProfile
from caches.models import CacheObject, CacheState, TtlPolicy
from caches.services import lifecycle
from caches.services.execution import operation_execute
from tests.caches.conftest import big_content
from tests.factories import actor_for

pytestmark = pytest.mark.django_db


def _create_economic(tenant, admin, *, gaps: list[float] | None) -> CacheObject:
    outcome = lifecycle.cache_create(
        tenant=tenant,
        actor=actor_for(admin),
        spec=lifecycle.CacheSpec(
            name="contracts",
            provider="vertex",
            model="gemini-2.5-flash",
            content=big_content(),
            ttl_seconds=3600,
            ttl_policy=TtlPolicy.ECONOMIC,
        ),
    )
    cache = outcome.operation.cache
    if gaps is not None:  # what the autopilot learned about this content before
        TtlProfile.objects.create(
            tenant=tenant,
            provider=cache.provider,
            model=cache.model,
            content_digest=cache.content_digest,
            gaps_seconds=gaps,
            last_query_at=timezone.now() - timedelta(seconds=gaps[-1]),
            queries=len(gaps) + 1,
        )
    operation_execute(operation_id=str(outcome.operation.pk))
    return CacheObject.objects.all_tenants().get(pk=cache.pk)


def test_a_keep_alive_of_zero_creates_the_cache_for_the_minimum_ttl_not_the_requested_hour(
    vertex, tenant_a, admin_a
) -> None:
    cache = _create_economic(tenant_a, admin_a, gaps=[36_000.0] * 8)  # reused only after 10 h
    assert cache.state == CacheState.ACTIVE
    assert vertex.create_requests()[0].body["ttl"] == "60s"
    assert cache.ttl_seconds == 60
    assert cache.expire_at - timezone.now() < timedelta(seconds=61)


def test_new_content_is_created_for_the_break_even_gap(vertex, tenant_a, admin_a) -> None:
    cache = _create_economic(tenant_a, admin_a, gaps=None)
    # Flash (seeded): (0.30 - 0.03) / 1.00 per hour = 972 s, not the requested 3600 s.
    assert vertex.create_requests()[0].body["ttl"] == "972s"
    assert cache.ttl_seconds == 972
