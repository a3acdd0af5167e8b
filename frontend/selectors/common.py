"""Helpers every console read model shares: the month window and micro-dollars → dollars."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The calendar month holding ``now``: its first instant and the next month's."""
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def usd(micros: int) -> float:
    """Micro-dollars as dollars for the page (JSON numbers; rounding to the micro-dollar)."""
    return round(micros / 1_000_000, 6)


def budget_display_rows(*, tenant: Any, budgets: list[Any], at: datetime) -> list[dict[str, Any]]:
    """Each budget's figure as a page and the live tile show it (dollars as JSON numbers).

    Straight from ``billing.selectors.budget_figures``, the one budget figure of the
    budgets page, the tenant page, the REST API and the live tile: never recomputed here.
    """
    from billing.selectors.budgets import ALERT_BASIS_TEXT, budget_figures

    figures = budget_figures(tenant=tenant, budgets=budgets, at=at)
    rows = []
    for budget in budgets:
        figure = figures[budget.pk]
        rows.append(
            {
                "id": str(budget.pk),
                "name": budget.name,
                "period": budget.period,
                "hard_limit": figure.hard_limit,
                "limit_usd": usd(figure.limit_micros),
                "spent_usd": usd(figure.spent_micros),
                "reserved_usd": usd(figure.reserved_micros),
                "committed_usd": usd(figure.committed_micros),
                "remaining_usd": usd(figure.remaining_micros),
                "used_fraction": min(1.0, figure.used_percent / 100),
                "used_percent": figure.used_percent,
                "alert_basis": ALERT_BASIS_TEXT,
            }
        )
    return rows
