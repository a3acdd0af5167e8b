"""Reading budgets, their current periods and alerts (always within one tenant)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from django.db.models import QuerySet

from billing.models import Budget, BudgetAlert, BudgetPeriod
from tenants.models import Tenant


def budget_list(*, tenant: Tenant, include_archived: bool = False) -> QuerySet[Budget]:
    """The tenant's budgets, with their service account loaded."""
    qs = Budget.objects.filter(tenant=tenant).select_related("principal")
    return qs if include_archived else qs.filter(archived_at__isnull=True)


def budget_get(*, tenant: Tenant, budget_id: str) -> Budget | None:
    """One budget of the tenant (archived included), or None: another tenant's is None."""
    return budget_list(tenant=tenant, include_archived=True).filter(pk=budget_id).first()


def budget_current_periods(
    *, tenant: Tenant, budgets: list[Budget], at: datetime
) -> dict[UUID, BudgetPeriod]:
    """``{budget_id: BudgetPeriod}`` for the periods covering ``at`` (one query)."""
    periods = BudgetPeriod.objects.filter(
        tenant=tenant,
        budget_id__in=[b.pk for b in budgets],
        period_start__lte=at,
        period_end__gt=at,
    )
    return {p.budget_id: p for p in periods}


def budget_alert_list(*, tenant: Tenant, budget_id: str | None = None) -> QuerySet[BudgetAlert]:
    """The tenant's alerts, newest first (the console's notification list)."""
    qs = BudgetAlert.objects.filter(tenant=tenant).select_related("budget", "period")
    return qs.filter(budget_id=budget_id) if budget_id else qs
