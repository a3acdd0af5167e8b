"""Budget periods: the calendar window of a budget at a time, its counters row, which
budgets apply to a caller. Spend is charged to the rows by the ledger's booking path
(``billing.services.ledger_booking``), nowhere else."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q

from billing.models import Budget, BudgetPeriod, BudgetPeriodKind
from billing.pricing import nanos_to_micros
from billing.selectors.usage import tenant_spend_nanos
from billing.services.ledger_booking import ledger_lock
from tenants.models import Tenant


def period_bounds(budget: Budget, at: datetime) -> tuple[datetime, datetime] | None:
    """The period of ``budget`` that contains ``at`` (UTC calendar), or None (custom range
    not covering ``at``)."""
    if budget.period == BudgetPeriodKind.CUSTOM:
        starts, ends = budget.starts_at, budget.ends_at  # both set on a custom budget
        if starts is not None and ends is not None and starts <= at < ends:
            return starts, ends
        return None
    utc = at.astimezone(UTC)
    if budget.period == BudgetPeriodKind.DAY:
        start = utc.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=1)
    start = utc.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    days = calendar.monthrange(start.year, start.month)[1]
    return start, start + timedelta(days=days)


def budget_period_ensure(*, budget: Budget, at: datetime) -> BudgetPeriod | None:
    """The budget's period row covering ``at``, created (and seeded) when missing.

    Seeding: a period created after its start begins with the spend the ledger already
    holds for its whole window (exact nanos: ledger rows and storage accruals booked so
    far), so a budget added mid-month counts the month. Seed and insert run under the
    ledger lock: a booking committed beside it is either in the seed or charged to the
    new row by its own transaction, never both and never neither. Live holds only
    release (they never add spend), so nothing seeded is counted again later.
    """
    bounds = period_bounds(budget, at)
    if bounds is None:
        return None
    start, end = bounds
    existing = BudgetPeriod.objects.filter(
        tenant_id=budget.tenant_id, budget=budget, period_start=start
    ).first()
    if existing is not None:
        return existing
    with transaction.atomic():
        ledger_lock()
        seed = tenant_spend_nanos(
            tenant_id=budget.tenant_id, since=start, until=end, principal_id=budget.principal_id
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO billing_budgetperiod (tenant_id, budget_id, period_start, "
                "period_end, limit_micros, hard_limit, spent_micros, spent_nanos, "
                "reserved_micros, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 0, now()) "
                "ON CONFLICT (tenant_id, budget_id, period_start) DO NOTHING",
                [
                    budget.tenant_id,
                    budget.pk,
                    start,
                    end,
                    budget.limit_micros,
                    budget.hard_limit,
                    nanos_to_micros(seed),
                    seed,
                ],
            )
    return BudgetPeriod.objects.get(tenant_id=budget.tenant_id, budget=budget, period_start=start)


def budgets_applicable(*, tenant: Tenant, principal_id: object, at: datetime) -> list[Budget]:
    """Active budgets that apply to a caller (tenant-wide, plus its own) and cover ``at``."""
    qs = Budget.objects.filter(tenant=tenant, archived_at__isnull=True)
    if principal_id is None:
        qs = qs.filter(principal__isnull=True)
    else:
        qs = qs.filter(Q(principal__isnull=True) | Q(principal_id=principal_id))
    return [b for b in qs if period_bounds(b, at) is not None]


def budget_periods_applicable(
    *, tenant: Tenant, principal_id: object, at: datetime
) -> list[BudgetPeriod]:
    """The current period rows (created when missing) of every budget that applies to a
    caller: the tenant-wide budgets plus the caller's service-account budgets. Read by the
    gateway's Redis holds (``billing.services.budget_reservations``)."""
    budgets = budgets_applicable(tenant=tenant, principal_id=principal_id, at=at)
    return [p for p in (budget_period_ensure(budget=b, at=at) for b in budgets) if p is not None]
