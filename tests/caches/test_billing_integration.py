"""Caches and billing: storage holds on creation, accrual while live, settlement at the end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.errors import BudgetExceeded
from billing.models import BudgetReservation, StorageAccrual
from billing.services.budgets import budget_create
from caches.models import CacheObject
from caches.services import lifecycle
from caches.services.execution import operation_execute
from caches.services.storage import cache_storage_accrue_recent
from tests.caches.conftest import big_content
from tests.factories import actor_for

pytestmark = pytest.mark.django_db


def _spec(**kw) -> lifecycle.CacheSpec:
    values = {
        "name": "contracts",
        "provider": "vertex",
        "model": "gemini-2.5-pro",
        "content": big_content(words=1500),
        "ttl_seconds": 86400,
    }
    values.update(kw)
    return lifecycle.CacheSpec(**values)


def test_a_cache_whose_ttl_storage_exceeds_the_budget_is_refused_with_nothing_sent(
    vertex, tenant_a, admin_a
) -> None:
    budget_create(
        actor=actor_for(admin_a),
        tenant=tenant_a,
        name="tiny",
        period="month",
        limit_micros=1_000,
        hard_limit=True,
    )
    with pytest.raises(BudgetExceeded) as raised:
        lifecycle.cache_create(tenant=tenant_a, actor=actor_for(admin_a), spec=_spec())
    assert raised.value.http_status == 402
    assert not CacheObject.objects.all_tenants().exists()
    assert vertex.requests() == []


def test_storage_is_held_accrued_and_settled_when_the_cache_ends(vertex, tenant_a, admin_a) -> None:
    budget_create(
        actor=actor_for(admin_a),
        tenant=tenant_a,
        name="ok",
        period="month",
        limit_micros=100_000_000,
        hard_limit=True,
    )
    outcome = lifecycle.cache_create(tenant=tenant_a, actor=actor_for(admin_a), spec=_spec())
    operation_execute(operation_id=str(outcome.operation.pk))
    cache = CacheObject.objects.all_tenants().get(pk=outcome.operation.cache_id)
    hold = BudgetReservation.objects.all_tenants().get(pk=cache.budget_reservation_id)
    assert hold.state == "held" and hold.amount_micros > 0
    # Pretend it has been live for 90 minutes, then accrue (twice: idempotent).
    CacheObject.objects.all_tenants().filter(pk=cache.pk).update(
        activated_at=timezone.now() - timedelta(minutes=90)
    )
    cache_storage_accrue_recent()
    cache_storage_accrue_recent()
    accrued = StorageAccrual.objects.all_tenants().filter(cache_id=str(cache.pk))
    total = sum(a.cost_micros for a in accrued)
    assert accrued.count() >= 2 and total > 0
    op = lifecycle.cache_evict(cache=cache, actor=actor_for(admin_a))
    operation_execute(operation_id=str(op.pk))
    hold.refresh_from_db()
    # Settled with the storage up to the second the cache ended (the seconds between the
    # last beat run and the eviction included), and a later beat run adds nothing.
    cache_storage_accrue_recent()
    final = sum(
        a.cost_nanos for a in StorageAccrual.objects.all_tenants().filter(cache_id=str(cache.pk))
    )
    assert hold.state == "settled" and hold.actual_micros == (final + 500) // 1000
    assert hold.actual_micros >= total
