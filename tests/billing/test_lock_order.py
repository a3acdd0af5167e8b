"""The two deadlock cycles of issue 29, replayed step by step on real PostgreSQL.

Each test drives the real services in threads (each its own PostgreSQL connection) and
holds them at the one interleaving that closed a cycle before the lock order of
``billing.services.budget_locks``: the next step starts only once PostgreSQL reports the
previous session waiting on a lock (``pg_stat_activity``). Before the fix, PostgreSQL
broke each cycle by killing one side (``deadlock detected``); now every side finishes
and the database's deadlock counter does not move.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from billing.models import BudgetAlert, BudgetPeriod, BudgetReservation
from billing.services.budgets import budget_create, budget_update
from billing.services.ledger_booking import budget_periods_charge
from caches.models import CacheObject, CacheState
from caches.services import lifecycle
from caches.services.execution import operation_execute
from caches.services.scheduling import cache_expire_due
from tests.caches.conftest import big_content
from tests.caches.processes import wait_for
from tests.factories import actor_for
from tests.gateway.support import price_vertex_storage

pytestmark = [pytest.mark.django_db(transaction=True)]

#: Long enough for a loaded machine; a session that never reaches its step fails the test.
STEP_SECONDS = 30


class Session(threading.Thread):
    """Run ``work`` on a connection of its own; remember its backend pid and its error."""

    def __init__(self, work: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.pid: int | None = None
        self.error: BaseException | None = None
        self.started_work = threading.Event()

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = int(cursor.fetchone()[0])
            self.started_work.set()
            self.work()
        except BaseException as exc:  # reported by the test, not swallowed
            self.error = exc
        finally:
            self.started_work.set()
            connections.close_all()

    def finish(self) -> None:
        self.join(STEP_SECONDS)
        assert not self.is_alive(), "a session did not finish"


def _waiting_on_a_lock(session: Session) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
            [session.pid],
        )
        return cursor.fetchone() is not None


def _blocked(session: Session, what: str) -> None:
    session.started_work.wait(STEP_SECONDS)
    wait_for(lambda: _waiting_on_a_lock(session), STEP_SECONDS, what)


def _blocked_or_done(session: Session, what: str) -> None:
    session.started_work.wait(STEP_SECONDS)
    wait_for(lambda: not session.is_alive() or _waiting_on_a_lock(session), STEP_SECONDS, what)


def _deadlocks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def test_a_budget_patch_and_a_settlement_that_raises_an_alert_both_commit(
    tenant_a, admin_a
) -> None:
    # The settlement updates the period and inserts a threshold alert, whose foreign key
    # to the budget PostgreSQL checks at COMMIT (Django's constraints are deferred).
    budget = budget_create(
        actor=actor_for(admin_a),
        tenant=tenant_a,
        name="b",
        period="month",
        limit_micros=100,
        thresholds=[50],
    )
    period = BudgetPeriod.objects.get(tenant=tenant_a, budget=budget)
    before = _deadlocks()
    charged, commit = threading.Event(), threading.Event()

    def settle() -> None:
        with transaction.atomic():
            budget_periods_charge(charges_nanos={period.pk: 60_000})
            charged.set()
            commit.wait(STEP_SECONDS)

    flush = Session(settle)
    flush.start()
    assert charged.wait(STEP_SECONDS)
    patch = Session(
        lambda: budget_update(
            actor=actor_for(admin_a), budget=budget, changes={"limit_micros": 200}
        )
    )
    patch.start()
    _blocked(patch, "the PATCH to wait for the settlement's period lock")
    commit.set()
    flush.finish()
    patch.finish()

    assert flush.error is None, flush.error
    assert patch.error is None, patch.error
    period.refresh_from_db()
    assert (period.spent_micros, period.limit_micros) == (60, 200)
    assert BudgetAlert.objects.filter(tenant=tenant_a, period=period, threshold=50).count() == 1
    assert _deadlocks() == before


def _expired_cache_with_a_storage_hold(tenant, admin, *, name: str, expired_ago: timedelta):
    outcome = lifecycle.cache_create(
        tenant=tenant,
        actor=actor_for(admin),
        spec=lifecycle.CacheSpec(
            name=name,
            provider="vertex",
            model="gemini-2.5-flash",
            content=big_content(name, words=300),
            ttl_seconds=3600,
        ),
    )
    operation_execute(operation_id=str(outcome.operation.pk))
    cache = CacheObject.objects.all_tenants().get(pk=outcome.operation.cache_id)
    assert cache.state == CacheState.ACTIVE and cache.budget_reservation_id is not None
    now = timezone.now()
    CacheObject.objects.all_tenants().filter(pk=cache.pk).update(
        activated_at=now - timedelta(minutes=30), expire_at=now - expired_ago
    )
    return cache


def test_the_storage_sweeper_and_the_hold_flush_over_two_tenants_both_commit(
    vertex, tenant_a, tenant_b, admin_a, admin_b
) -> None:
    price_vertex_storage(model="gemini-2.5-flash")
    # Tenant A's period gets the lower id (the flush locks A's first); B's cache expired
    # first (the sweeper used to settle B's hold first, then A's, in one transaction).
    for tenant, admin in ((tenant_a, admin_a), (tenant_b, admin_b)):
        budget_create(
            actor=actor_for(admin), tenant=tenant, name="b", period="month", limit_micros=10**9
        )
    period_a = BudgetPeriod.objects.get(tenant=tenant_a)
    period_b = BudgetPeriod.objects.get(tenant=tenant_b)
    assert period_a.pk < period_b.pk
    cache_a = _expired_cache_with_a_storage_hold(
        tenant_a, admin_a, name="a", expired_ago=timedelta(minutes=1)
    )
    cache_b = _expired_cache_with_a_storage_hold(
        tenant_b, admin_b, name="b", expired_ago=timedelta(minutes=2)
    )
    before = _deadlocks()
    held, release = threading.Event(), threading.Event()

    def hold_a_reservation() -> None:
        # A session that holds cache A's reservation (a settle of it in progress) stops
        # the sweeper between the two caches.
        with transaction.atomic():
            BudgetReservation.objects.all_tenants().select_for_update().get(
                pk=cache_a.budget_reservation_id
            )
            held.set()
            release.wait(STEP_SECONDS)

    holder = Session(hold_a_reservation)
    holder.start()
    assert held.wait(STEP_SECONDS)
    sweeper = Session(cache_expire_due)
    sweeper.start()
    _blocked(sweeper, "the sweeper to reach cache A's reservation")

    def flush_both() -> None:
        with transaction.atomic():
            budget_periods_charge(charges_nanos={period_a.pk: 5_000, period_b.pk: 7_000})

    flush = Session(flush_both)
    flush.start()
    _blocked_or_done(flush, "the flush to finish or wait for tenant B's period")
    release.set()
    for session in (holder, sweeper, flush):
        session.finish()

    assert sweeper.error is None, sweeper.error
    assert flush.error is None, flush.error
    states = dict(
        CacheObject.objects.all_tenants()
        .filter(pk__in=[cache_a.pk, cache_b.pk])
        .values_list("pk", "state")
    )
    assert states == {cache_a.pk: CacheState.EXPIRED, cache_b.pk: CacheState.EXPIRED}
    holds = BudgetReservation.objects.all_tenants().filter(
        pk__in=[cache_a.budget_reservation_id, cache_b.budget_reservation_id]
    )
    assert set(holds.values_list("state", flat=True)) == {"settled"}
    for period in (period_a, period_b):
        period.refresh_from_db()
        assert period.reserved_micros == 0
    assert _deadlocks() == before
