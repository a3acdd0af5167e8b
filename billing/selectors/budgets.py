"""Reading budgets, their current periods and alerts (always within one tenant)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.db.models import QuerySet

from billing.models import Budget, BudgetAlert, BudgetPeriod
from controlplane import ops
from controlplane.redis import keys
from tenants.models import Tenant

logger = logging.getLogger(__name__)


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


#: What a budget's thresholds, meters and percentages compare with its limit. The hard
#: limit refuses a request when spent + reserved + its estimate would pass the limit, so
#: the meter and the alerts count the same spent + reserved (not spent alone).
ALERT_BASIS = "spent_plus_reserved"
ALERT_BASIS_TEXT = "spent + reserved (in flight)"


@dataclass(frozen=True)
class BudgetFigure:
    """One budget's figures for its current period (micro-USD): the one source of the
    budgets page, the tenant page, the REST API and the live tile."""

    budget_id: UUID
    name: str
    hard_limit: bool
    limit_micros: int
    spent_micros: int
    reserved_micros: int
    period_start: datetime | None
    period_end: datetime | None
    spent_nanos: int = 0  # exact: Σ ledger + Σ storage of the period (spent_micros rounds it)

    @property
    def committed_micros(self) -> int:
        """Spent plus reserved: what the hard limit and the alerts compare."""
        return self.spent_micros + self.reserved_micros

    @property
    def remaining_micros(self) -> int:
        return max(0, self.limit_micros - self.committed_micros)

    @property
    def used_percent(self) -> float:
        """Committed as a percentage of the limit (may pass 100: settled overruns)."""
        if self.limit_micros <= 0:
            return 0.0
        return round(self.committed_micros * 100 / self.limit_micros, 2)

    def as_dict(self) -> dict[str, object]:
        """The wire shape (API and live tile): integer micro-USD, ISO times."""
        return {
            "budget": str(self.budget_id),
            "name": self.name,
            "hard_limit": self.hard_limit,
            "limit_micros": self.limit_micros,
            "spent_micros": self.spent_micros,
            "spent_nanos": self.spent_nanos,
            "reserved_micros": self.reserved_micros,
            "committed_micros": self.committed_micros,
            "remaining_micros": self.remaining_micros,
            "used_percent": self.used_percent,
            "alert_basis": ALERT_BASIS,
            "period_start": self.period_start.isoformat() if self.period_start else None,
            "period_end": self.period_end.isoformat() if self.period_end else None,
        }


def budget_periods_gateway_reserved(*, period_ids: list[int]) -> dict[int, int]:
    """µ$ the gateway holds in Redis per period (open holds, and settled costs waiting
    for their ledger booking): one round trip. A period Redis has not loaded holds 0;
    an unreachable Redis reads as {} (the figures fall back to PostgreSQL's own holds)."""
    if not period_ids:
        return {}
    try:
        pipe = ops.redis_client().pipeline(transaction=False)
        for period_id in period_ids:
            pipe.hget(keys.budget_period(period_id)[0], "reserved")
        replies = pipe.execute()
    except Exception:
        logger.warning("budget figures: Redis unreachable, gateway holds not counted")
        return {}
    return {pid: max(0, int(raw or 0)) for pid, raw in zip(period_ids, replies, strict=True)}


def budget_figures(
    *, tenant: Tenant, budgets: list[Budget], at: datetime
) -> dict[UUID, BudgetFigure]:
    """``{budget_id: BudgetFigure}`` at ``at``: spent, reserved, remaining (one query and
    one Redis round trip).

    THE budget figure: every page, the API and the live tile read it here, so they never
    disagree. Spent is the ``BudgetPeriod`` row's (the ledger's); reserved is what is in
    flight: the row's holds (cache storage, held in PostgreSQL) plus the gateway's holds
    in Redis (open requests and streams, and settled costs until their ledger booking),
    the sum the gateway's hard limit refuses on. A budget whose current period has no
    row yet has spent and reserved 0 and the budget's own limit.
    """
    periods = budget_current_periods(tenant=tenant, budgets=budgets, at=at)
    in_flight = budget_periods_gateway_reserved(period_ids=[p.pk for p in periods.values()])
    figures = {}
    for budget in budgets:
        period = periods.get(budget.pk)
        figures[budget.pk] = BudgetFigure(
            budget_id=budget.pk,
            name=budget.name,
            hard_limit=period.hard_limit if period else budget.hard_limit,
            limit_micros=period.limit_micros if period else budget.limit_micros,
            spent_micros=period.spent_micros if period else 0,
            spent_nanos=period.spent_nanos if period else 0,
            reserved_micros=period.reserved_micros + in_flight.get(period.pk, 0) if period else 0,
            period_start=period.period_start if period else None,
            period_end=period.period_end if period else None,
        )
    return figures


def budget_alert_list(*, tenant: Tenant, budget_id: str | None = None) -> QuerySet[BudgetAlert]:
    """The tenant's alerts, newest first (the console's notification list)."""
    qs = BudgetAlert.objects.filter(tenant=tenant).select_related("budget", "period")
    return qs.filter(budget_id=budget_id) if budget_id else qs
