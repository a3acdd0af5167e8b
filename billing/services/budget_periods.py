"""Budget periods: the calendar window of a budget at a time and its counters row."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta

from django.db import connection

from billing.models import Budget, BudgetPeriod, BudgetPeriodKind
from billing.selectors.usage import tenant_spend_micros


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
    holds for it (up to the flush lag), so a budget added mid-month counts the month.
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
    seed = tenant_spend_micros(
        tenant_id=budget.tenant_id,
        since=start,
        until=min(at, end),
        principal_id=budget.principal_id,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO billing_budgetperiod (tenant_id, budget_id, period_start, period_end, "
            "limit_micros, hard_limit, spent_micros, reserved_micros, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, 0, now()) "
            "ON CONFLICT (tenant_id, budget_id, period_start) DO NOTHING",
            [budget.tenant_id, budget.pk, start, end, budget.limit_micros, budget.hard_limit, seed],
        )
    return BudgetPeriod.objects.get(tenant_id=budget.tenant_id, budget=budget, period_start=start)
