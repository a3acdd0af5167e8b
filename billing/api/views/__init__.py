"""Billing API: thin adapters that validate input, call one service or selector, serialize.

Tenant routes need ``usage.get`` (usage, spend, savings, export, break-even),
``budgets.get`` (read budgets and alerts) or ``budgets.update`` (write budgets); the
platform price book needs ``tenants.list`` to read and ``prices.manage`` to write.

One module per topic (``prices``, ``usage``, ``budgets``); the view classes are importable
from here, as ``billing.api.urls`` names them.
"""

from billing.api.views.budgets import BudgetAlertViewSet, BudgetViewSet
from billing.api.views.prices import PlatformModelPriceViewSet, PlatformPoolPriceViewSet
from billing.api.views.usage import BreakEvenViewSet, CsvRenderer, UsageViewSet

__all__ = [
    "BreakEvenViewSet",
    "BudgetAlertViewSet",
    "BudgetViewSet",
    "CsvRenderer",
    "PlatformModelPriceViewSet",
    "PlatformPoolPriceViewSet",
    "UsageViewSet",
]
