"""Billing routes: tenant usage, spend, budgets and alerts; the platform price book."""

from __future__ import annotations

from django.urls import path

from billing.api import views

T = "tenants/<slug:tenant>"

urlpatterns = [
    path(
        "platform/prices",
        views.PlatformModelPriceViewSet.as_view({"get": "list", "post": "create"}),
        name="platform-price-list",
    ),
    path(
        "platform/prices/<int:pk>",
        views.PlatformModelPriceViewSet.as_view({"get": "retrieve"}),
        name="platform-price-detail",
    ),
    path(
        "platform/prices/<int:pk>/correct",
        views.PlatformModelPriceViewSet.as_view({"post": "correct"}),
        name="platform-price-correct",
    ),
    path(
        "platform/pool-prices",
        views.PlatformPoolPriceViewSet.as_view({"get": "list", "post": "create"}),
        name="platform-pool-price-list",
    ),
    path(
        "platform/pool-prices/<int:pk>",
        views.PlatformPoolPriceViewSet.as_view({"get": "retrieve"}),
        name="platform-pool-price-detail",
    ),
    path(
        "platform/pool-prices/<int:pk>/correct",
        views.PlatformPoolPriceViewSet.as_view({"post": "correct"}),
        name="platform-pool-price-correct",
    ),
    path(f"{T}/usage", views.UsageViewSet.as_view({"get": "list"}), name="tenant-usage-list"),
    path(
        f"{T}/usage/spend", views.UsageViewSet.as_view({"get": "spend"}), name="tenant-usage-spend"
    ),
    path(
        f"{T}/usage/savings",
        views.UsageViewSet.as_view({"get": "savings"}),
        name="tenant-usage-savings",
    ),
    path(
        f"{T}/usage/export.csv",
        views.UsageViewSet.as_view({"get": "export"}),
        name="tenant-usage-export",
    ),
    path(
        f"{T}/break-even",
        views.BreakEvenViewSet.as_view({"post": "create"}),
        name="tenant-break-even",
    ),
    path(
        f"{T}/budgets",
        views.BudgetViewSet.as_view({"get": "list", "post": "create"}),
        name="tenant-budget-list",
    ),
    path(
        f"{T}/budgets/<str:pk>",
        views.BudgetViewSet.as_view(
            {"get": "retrieve", "patch": "partial_update", "delete": "destroy"}
        ),
        name="tenant-budget-detail",
    ),
    path(
        f"{T}/budgets/<str:pk>/rotate-secret",
        views.BudgetViewSet.as_view({"post": "rotate_secret"}),
        name="tenant-budget-rotate-secret",
    ),
    path(
        f"{T}/budget-alerts",
        views.BudgetAlertViewSet.as_view({"get": "list"}),
        name="tenant-budget-alert-list",
    ),
]
