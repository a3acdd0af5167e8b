"""Budget periods: the calendar window of a budget at a time, its counters row, which
budgets apply to a caller, and settled spend charged to the rows."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Q

from billing.models import Budget, BudgetPeriod, BudgetPeriodKind
from billing.selectors.usage import tenant_spend_micros
from billing.services.budget_alerts import budget_alerts_raise
from billing.services.budget_locks import budget_periods_lock
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


def budget_periods_charge(*, charges: dict[int, int]) -> None:
    """Add settled spend to period rows (period id → micros) and raise crossed alerts.

    Called by the batch flush of Redis holds, inside its transaction. Lock order
    (``billing.services.budget_locks``): the budgets, then the periods, each in pk order;
    alerts (and with them the audit chain heads) per tenant in tenant-id order, so two
    flushes of batches spanning the same tenants take their heads in the same order.
    """
    moved = []
    with connection.cursor() as cursor:
        for period_id in budget_periods_lock(period_ids=charges):
            spend = charges[period_id]
            cursor.execute(
                "UPDATE billing_budgetperiod SET spent_micros = spent_micros + %s WHERE id = %s "
                "RETURNING id, budget_id, spent_micros, limit_micros, tenant_id",
                [spend, period_id],
            )
            row = cursor.fetchone()
            if row is not None:
                moved.append(
                    {
                        "period_id": row[0],
                        "budget_id": row[1],
                        "old_spent": row[2] - spend,
                        "new_spent": row[2],
                        "limit": row[3],
                        "tenant_id": row[4],
                    }
                )
    by_tenant: dict[UUID | str, list[dict[str, Any]]] = {}
    for m in moved:
        by_tenant.setdefault(m["tenant_id"], []).append(m)
    for tenant_id, rows in sorted(by_tenant.items(), key=lambda item: str(item[0])):
        budget_alerts_raise(tenant_id=tenant_id, moved=rows)
