"""Billing routes: tenant usage, spend, budgets and alerts; the platform price book."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from billing.api import views

T = "tenants/<slug:tenant>"

router = SimpleRouter(trailing_slash=False, use_regex_path=False)
router.register("platform/prices", views.PlatformModelPriceViewSet, basename="platform-price")
router.register(
    "platform/pool-prices", views.PlatformPoolPriceViewSet, basename="platform-pool-price"
)
router.register(f"{T}/usage", views.UsageViewSet, basename="tenant-usage")
router.register(f"{T}/break-even", views.BreakEvenViewSet, basename="tenant-break-even")
router.register(f"{T}/budgets", views.BudgetViewSet, basename="tenant-budget")
router.register(f"{T}/budget-alerts", views.BudgetAlertViewSet, basename="tenant-budget-alert")

urlpatterns = router.urls
