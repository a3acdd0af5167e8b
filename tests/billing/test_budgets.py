"""Budgets: hard limits enforced before work, race-free; holds never leak; alerts once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from audit.models import AuditEvent
from billing.errors import BudgetExceeded, InvalidBudget, InvalidPeriod, InvalidThreshold
from billing.models import (
    Budget,
    BudgetAlert,
    BudgetPeriod,
    BudgetReservation,
    ReservationState,
    UsageRollup,
)
from billing.services import (
    budget_create,
    budget_release,
    budget_reservations_expire,
    budget_reserve,
    budget_reserve_cache_storage,
    budget_settle,
    budget_update,
)
from billing.services.budget_periods import period_bounds
from billing.tasks import budget_reservations_expire_task
from tenants.errors import UnknownPrincipal
from tests.billing.ledger_support import book_micros
from tests.factories import ServiceAccountFactory, TenantFactory

pytestmark = pytest.mark.django_db

DOLLAR = 1_000_000


def _budget(actor, tenant, **overrides) -> Budget:
    fields = {
        "name": "monthly",
        "period": "month",
        "limit_micros": 10 * DOLLAR,
        "thresholds": [50, 80, 100],
    }
    fields.update(overrides)
    return budget_create(actor=actor, tenant=tenant, **fields)


def _period(budget: Budget) -> BudgetPeriod:
    return BudgetPeriod.objects.all_tenants().get(budget=budget)


def test_a_reservation_holds_then_settles_and_only_the_ledger_books_the_cost(
    tenant_a, admin_a, actor
) -> None:
    budget = _budget(actor, tenant_a)
    hold = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=3 * DOLLAR, request_id="r1"
    )
    assert (_period(budget).reserved_micros, _period(budget).spent_micros) == (3 * DOLLAR, 0)
    settled = budget_settle(reservation=hold, actual_micros=2 * DOLLAR)
    assert (settled.state, settled.actual_micros) == (ReservationState.SETTLED, 2 * DOLLAR)
    assert (_period(budget).reserved_micros, _period(budget).spent_micros) == (0, 0)
    book_micros(tenant_a, 2 * DOLLAR)  # the cost, booked once, by the ledger
    assert (_period(budget).reserved_micros, _period(budget).spent_micros) == (0, 2 * DOLLAR)
    # Settling again is a no-op.
    budget_settle(reservation=hold, actual_micros=2 * DOLLAR)
    assert _period(budget).spent_micros == 2 * DOLLAR


def test_over_the_hard_limit_the_request_is_refused_before_any_work(
    tenant_a, admin_a, actor
) -> None:
    budget = _budget(actor, tenant_a, limit_micros=5 * DOLLAR)
    budget_reserve(tenant=tenant_a, principal=admin_a, estimate_micros=4 * DOLLAR, request_id="r1")
    with pytest.raises(BudgetExceeded) as caught:
        budget_reserve(
            tenant=tenant_a, principal=admin_a, estimate_micros=2 * DOLLAR, request_id="r2"
        )
    assert (caught.value.code, caught.value.http_status) == ("budget_exceeded", 402)
    assert _period(budget).reserved_micros == 4 * DOLLAR
    assert not BudgetReservation.objects.all_tenants().filter(request_id="r2").exists()
    denial = AuditEvent.objects.get(action="billing.budget.exceeded")
    assert denial.outcome == "denied" and denial.details["request_id"] == "r2"


def test_a_soft_budget_alerts_but_never_refuses(tenant_a, admin_a, actor) -> None:
    budget = _budget(actor, tenant_a, limit_micros=DOLLAR, hard_limit=False)
    hold = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=3 * DOLLAR, request_id="r1"
    )
    budget_settle(reservation=hold, actual_micros=3 * DOLLAR)
    book_micros(tenant_a, 3 * DOLLAR)
    assert _period(budget).spent_micros == 3 * DOLLAR
    assert sorted(BudgetAlert.objects.all_tenants().values_list("threshold", flat=True)) == [
        50,
        80,
        100,
    ]


def test_a_replayed_request_id_returns_the_first_reservation(tenant_a, admin_a, actor) -> None:
    budget = _budget(actor, tenant_a)
    first = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=DOLLAR, request_id="same"
    )
    again = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=DOLLAR, request_id="same"
    )
    assert first.pk == again.pk and _period(budget).reserved_micros == DOLLAR


def test_without_a_budget_nothing_is_held_or_written(tenant_a, admin_a) -> None:
    hold = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=DOLLAR, request_id="r1"
    )
    assert hold is None  # no reservation: nothing to settle or release
    assert not BudgetReservation.objects.all_tenants().exists()


def test_a_service_account_budget_applies_to_that_account_only(tenant_a, admin_a, actor) -> None:
    bot = ServiceAccountFactory(tenant=tenant_a)
    _budget(actor, tenant_a, name="bot", limit_micros=DOLLAR, principal_id=str(bot.pk))
    with pytest.raises(BudgetExceeded):
        budget_reserve(
            tenant=tenant_a, principal=bot, estimate_micros=2 * DOLLAR, request_id="bot-1"
        )
    budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=2 * DOLLAR, request_id="human-1"
    )
    other = ServiceAccountFactory(tenant=TenantFactory())
    with pytest.raises(UnknownPrincipal):
        _budget(actor, tenant_a, principal_id=str(other.pk))


def test_release_and_expiry_return_the_hold(tenant_a, admin_a, actor) -> None:
    budget = _budget(actor, tenant_a)
    failed = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=DOLLAR, request_id="failed"
    )
    assert budget_release(reservation=failed).state == ReservationState.RELEASED
    budget_reserve(
        tenant=tenant_a,
        principal=admin_a,
        estimate_micros=2 * DOLLAR,
        request_id="timed-out",
        ttl=timedelta(seconds=30),
    )
    live = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=3 * DOLLAR, request_id="live"
    )
    assert _period(budget).reserved_micros == 5 * DOLLAR
    later = timezone.now() + timedelta(minutes=1)
    assert budget_reservations_expire(now=later) == 1
    assert budget_reservations_expire(now=later) == 0  # running it twice is a no-op
    assert _period(budget).reserved_micros == 3 * DOLLAR
    assert (
        BudgetReservation.objects.all_tenants().get(request_id="timed-out").state
        == ReservationState.EXPIRED
    )
    assert BudgetReservation.objects.all_tenants().get(pk=live.pk).state == ReservationState.HELD


def test_the_expiry_task_run_twice_is_a_noop(tenant_a, admin_a, actor) -> None:
    budget = _budget(actor, tenant_a)
    hold = budget_reserve(
        tenant=tenant_a,
        principal=admin_a,
        estimate_micros=DOLLAR,
        request_id="stale",
        ttl=timedelta(seconds=1),
    )
    BudgetReservation.objects.all_tenants().filter(pk=hold.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert budget_reservations_expire_task.apply().result == 1
    assert budget_reservations_expire_task.apply().result == 0
    assert _period(budget).reserved_micros == 0


def test_a_settle_after_expiry_releases_nothing_twice_and_the_ledger_books_the_work(
    tenant_a, admin_a, actor
) -> None:
    budget = _budget(actor, tenant_a)
    hold = budget_reserve(
        tenant=tenant_a,
        principal=admin_a,
        estimate_micros=DOLLAR,
        request_id="slow",
        ttl=timedelta(seconds=1),
    )
    budget_reservations_expire(now=timezone.now() + timedelta(seconds=5))
    budget_settle(reservation=hold, actual_micros=DOLLAR // 2)
    book_micros(tenant_a, DOLLAR // 2)
    assert (_period(budget).reserved_micros, _period(budget).spent_micros) == (0, DOLLAR // 2)


def test_each_threshold_alerts_once_per_period(tenant_a, admin_a, actor) -> None:
    budget = _budget(actor, tenant_a, limit_micros=100 * DOLLAR)
    for i, dollars in enumerate([30, 25, 10, 10, 5, 19, 1]):  # 30 55 65 75 80 99 100
        hold = budget_reserve(
            tenant=tenant_a, principal=admin_a, estimate_micros=dollars * DOLLAR, request_id=f"r{i}"
        )
        budget_settle(reservation=hold, actual_micros=dollars * DOLLAR)
        book_micros(tenant_a, dollars * DOLLAR)
    alerts = list(BudgetAlert.objects.all_tenants().order_by("threshold"))
    assert [(a.threshold, a.spent_micros) for a in alerts] == [
        (50, 55 * DOLLAR),
        (80, 80 * DOLLAR),
        (100, 100 * DOLLAR),
    ]
    assert all(a.webhook_state == "none" for a in alerts)  # no webhook configured
    crossed = AuditEvent.objects.filter(action="billing.budget.threshold_crossed")
    assert crossed.count() == 3 and {e.tenant_id for e in crossed} == {tenant_a.pk}
    assert BudgetAlert.objects.all_tenants().filter(budget=budget).count() == 3


def test_a_budget_created_mid_month_starts_from_the_spend_so_far(tenant_a, admin_a, actor) -> None:
    now = timezone.now()
    start, _ = period_bounds(Budget(period="month"), now)
    UsageRollup.objects.create(
        tenant=tenant_a,
        granularity="day",
        bucket=start,
        provider="vertex",
        model="gemini-2.5-pro",
        requests=1,
        cost_micros=4 * DOLLAR,
        cost_nanos=4 * DOLLAR * 1000,
    )
    UsageRollup.objects.create(
        tenant=tenant_a,
        granularity="minute",
        bucket=start,
        provider="vertex",
        model="gemini-2.5-pro",
        requests=1,
        cost_micros=4 * DOLLAR,
        cost_nanos=4 * DOLLAR * 1000,
    )
    budget = _budget(actor, tenant_a)
    assert _period(budget).spent_micros == 4 * DOLLAR


def test_a_cache_creation_reserves_the_storage_of_its_ttl(
    tenant_a, admin_a, actor, price_book
) -> None:
    budget = _budget(actor, tenant_a, limit_micros=DOLLAR)
    hold = budget_reserve_cache_storage(
        tenant=tenant_a,
        principal=admin_a,
        request_id="cache-op-1",
        provider="vertex",
        model="gemini-2.5-pro",
        tokens=100_000,
        ttl=timedelta(hours=2),
    )
    assert hold.amount_micros == 900_000 and hold.kind == "cache_storage"  # 2 h × $0.45
    assert _period(budget).reserved_micros == 900_000
    with pytest.raises(BudgetExceeded):
        budget_reserve_cache_storage(
            tenant=tenant_a,
            principal=admin_a,
            request_id="cache-op-2",
            provider="vertex",
            model="gemini-2.5-pro",
            tokens=100_000,
            ttl=timedelta(hours=1),
        )


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"period": "fortnight"}, InvalidPeriod),
        ({"period": "custom"}, InvalidPeriod),
        ({"period": "month", "starts_at": timezone.now()}, InvalidPeriod),
        ({"thresholds": [0]}, InvalidThreshold),
        ({"thresholds": [101]}, InvalidThreshold),
        ({"thresholds": ["50"]}, InvalidThreshold),
        ({"thresholds": list(range(1, 20))}, InvalidThreshold),
        ({"limit_micros": 0}, InvalidBudget),
        ({"limit_micros": -5}, InvalidBudget),
        ({"limit_micros": 1.5}, InvalidBudget),
        ({"webhook_url": "ftp://example.com/x"}, InvalidBudget),
        ({"name": ""}, InvalidBudget),
    ],
)
def test_bad_budgets_are_rejected_and_nothing_is_written(tenant_a, actor, overrides, error) -> None:
    before = AuditEvent.objects.count()
    with pytest.raises(error):
        _budget(actor, tenant_a, **overrides)
    assert (
        not Budget.objects.all_tenants().exists()
        and not BudgetPeriod.objects.all_tenants().exists()
    )
    assert AuditEvent.objects.count() == before


def test_an_update_applies_to_the_current_period_and_cannot_change_the_period(
    tenant_a, admin_a, actor
) -> None:
    budget = _budget(actor, tenant_a)
    budget_update(actor=actor, budget=budget, changes={"limit_micros": 20 * DOLLAR})
    assert _period(budget).limit_micros == 20 * DOLLAR
    with pytest.raises(InvalidPeriod):
        budget_update(actor=actor, budget=budget, changes={"period": "day"})
    with pytest.raises(InvalidThreshold):
        budget_update(actor=actor, budget=budget, changes={"thresholds": [150]})
    budget.refresh_from_db()
    assert budget.thresholds == [50, 80, 100]


@pytest.mark.django_db(transaction=True)
def test_200_concurrent_reservations_against_a_budget_that_fits_50_overspend_by_zero(
    price_book,
) -> None:
    from tests.factories import HumanFactory, actor_for, bind

    tenant = TenantFactory()
    admin = HumanFactory()
    bind(admin, "tenant.admin", tenant)
    estimate = 1_234_567
    budget = budget_create(
        actor=actor_for(admin),
        tenant=tenant,
        name="tight",
        period="day",
        limit_micros=50 * estimate,
        thresholds=[50, 100],
    )
    threads = 40
    barrier = threading.Barrier(threads)
    granted, refused, errors = [], [], []
    lock = threading.Lock()

    def worker(worker_index: int) -> None:
        try:
            barrier.wait()
            for n in range(worker_index, 200, threads):
                try:
                    hold = budget_reserve(
                        tenant=tenant,
                        principal=admin,
                        estimate_micros=estimate,
                        request_id=f"req-{n}",
                    )
                    with lock:
                        granted.append(hold)
                except BudgetExceeded:
                    with lock:
                        refused.append(n)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(worker, range(threads)))
    assert errors == []
    assert (len(granted), len(refused)) == (50, 150)
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    assert period.reserved_micros == period.limit_micros  # exactly full, never over
    for hold in granted:
        budget_settle(reservation=hold, actual_micros=estimate)
    book_micros(tenant, 50 * estimate)
    period.refresh_from_db()
    assert (period.spent_micros, period.reserved_micros) == (50 * estimate, 0)
    assert period.spent_micros - period.limit_micros == 0  # overspend: exactly zero
    assert BudgetAlert.objects.all_tenants().filter(budget=budget).count() == 2
    assert AuditEvent.objects.filter(action="billing.budget.exceeded").count() == 150
