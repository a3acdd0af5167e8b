"""What a new cache would do to the caller's budgets, in words an operator can act on.

The figures are billing's one budget figure (``billing.selectors.budget_figures``), so a
preview, the budgets page and a refusal all quote the same spent, reserved and remaining.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from frontend.selectors.common import usd
from tenants.models import Principal, Tenant


def _applicable(*, tenant: Tenant, principal: Principal | None) -> list[Any]:
    from billing.services.budget_periods import budgets_applicable

    principal_id = principal.pk if principal is not None else None
    return budgets_applicable(tenant=tenant, principal_id=principal_id, at=timezone.now())


def cache_budget_preview(
    *, tenant: Tenant, principal: Principal | None, estimate_micros: int | None
) -> list[dict[str, Any]]:
    """Each budget a new cache would be held against: its name, limit, spent + reserved,
    remaining, the estimate, and whether creating the cache would be refused."""
    from billing.selectors.budgets import budget_figures
    from billing.ttl_policy import NEAR_BUDGET

    budgets = _applicable(tenant=tenant, principal=principal)
    figures = budget_figures(tenant=tenant, budgets=budgets, at=timezone.now())
    rows = []
    for budget in budgets:
        fig = figures[budget.pk]
        verdict = "fits"
        if fig.hard_limit and fig.used_percent >= NEAR_BUDGET * 100:
            verdict = "near_limit"
        elif (
            fig.hard_limit
            and estimate_micros is not None
            and estimate_micros > fig.remaining_micros
        ):
            verdict = "exceeds"
        rows.append(
            {
                "name": budget.name,
                "hard_limit": fig.hard_limit,
                "limit_usd": usd(fig.limit_micros),
                "committed_usd": usd(fig.committed_micros),
                "remaining_usd": usd(fig.remaining_micros),
                "estimate_usd": usd(estimate_micros) if estimate_micros is not None else None,
                "near_percent": int(NEAR_BUDGET * 100),
                "verdict": verdict,
            }
        )
    return rows


def budget_refusal_text(*, tenant: Tenant, details: dict[str, Any], near: bool) -> str:
    """A budget refusal (``budget_exceeded`` / ``budget_near_limit``) in plain words,
    naming the budget and its amounts from the refusal's own details."""
    from billing.selectors.budgets import budget_get

    budget = None
    if details.get("budget"):
        budget = budget_get(tenant=tenant, budget_id=str(details["budget"]))
    name = f"“{budget.name}”" if budget is not None else "a hard budget"
    limit = int(details.get("limit_micros", 0))
    committed = int(details.get("spent_micros", 0)) + int(details.get("reserved_micros", 0))
    remaining = max(0, limit - committed)
    money = "${:,.4f}".format
    if near:
        return (
            f"Budget {name} has {money(remaining / 1e6)} left of {money(limit / 1e6)} "
            f"(spent + reserved {money(committed / 1e6)}, past "
            f"{details.get('near_budget_percent', 90)} %): no new caches until it recovers."
        )
    estimate = int(details.get("estimate_micros", 0))
    return (
        f"Budget {name} has {money(remaining / 1e6)} left of {money(limit / 1e6)}; "
        f"this would hold an estimated {money(estimate / 1e6)}, so it was refused."
    )
