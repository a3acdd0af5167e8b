"""Reads of billing data; see the topic modules (prices, usage, usage_quotes, spend_export,
budgets)."""

from billing.selectors.budgets import (
    ALERT_BASIS,
    BudgetFigure,
    budget_alert_list,
    budget_current_periods,
    budget_figures,
    budget_get,
    budget_list,
)
from billing.selectors.prices import (
    PriceIndex,
    model_price_list,
    model_price_resolve,
    pool_price_list,
    pool_price_resolve,
)
from billing.selectors.spend_export import spend_export_rows
from billing.selectors.usage import (
    savings_summary,
    spend_by_cache,
    spend_grouped,
    tenant_spend_micros,
    usage_list,
)
from billing.selectors.usage_quotes import usage_cost_quote, usage_estimate_micros

__all__ = [
    "ALERT_BASIS",
    "BudgetFigure",
    "PriceIndex",
    "budget_alert_list",
    "budget_current_periods",
    "budget_figures",
    "budget_get",
    "budget_list",
    "model_price_list",
    "model_price_resolve",
    "pool_price_list",
    "pool_price_resolve",
    "savings_summary",
    "spend_by_cache",
    "spend_export_rows",
    "spend_grouped",
    "tenant_spend_micros",
    "usage_cost_quote",
    "usage_estimate_micros",
    "usage_list",
]
