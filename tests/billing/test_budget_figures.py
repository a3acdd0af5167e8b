"""One budget figure: spent, reserved and remaining from ``billing.selectors.budget_figures``,
the same in the REST API, the budgets page and the tenant page; alerts count spent +
reserved, the basis the hard limit refuses on."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from billing.models import BudgetAlert
from billing.selectors import budget_figures
from billing.services import budget_create, budget_reserve, budget_settle
from tests.billing.ledger_support import book_micros

pytestmark = pytest.mark.django_db

DOLLAR = 1_000_000


def _budget(actor, tenant, **kwargs):
    return budget_create(
        actor=actor,
        tenant=tenant,
        name=kwargs.pop("name", "monthly"),
        period="month",
        limit_micros=kwargs.pop("limit_micros", 10 * DOLLAR),
        **kwargs,
    )


def test_a_budget_figure_counts_spent_and_reserved_and_what_remains(
    tenant_a, admin_a, actor
) -> None:
    budget = _budget(actor, tenant_a)
    assert (
        budget_figures(tenant=tenant_a, budgets=[budget], at=timezone.now())[
            budget.pk
        ].remaining_micros
        == 10 * DOLLAR
    )  # no period row yet: nothing spent, all remains
    spent = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=2 * DOLLAR, request_id="done"
    )
    budget_settle(reservation=spent, actual_micros=3 * DOLLAR)
    book_micros(tenant_a, 3 * DOLLAR)  # the spend, booked by the ledger
    budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=4 * DOLLAR, request_id="in-flight"
    )
    fig = budget_figures(tenant=tenant_a, budgets=[budget], at=timezone.now())[budget.pk]
    assert (fig.spent_micros, fig.reserved_micros) == (3 * DOLLAR, 4 * DOLLAR)
    assert (fig.committed_micros, fig.remaining_micros, fig.used_percent) == (
        7 * DOLLAR,
        3 * DOLLAR,
        70.0,
    )


def test_a_hold_alone_raises_the_threshold_it_crosses_before_any_refusal(
    tenant_a, admin_a, actor
) -> None:
    """The issue's case: at 85 % every request was refused and no alert had fired."""
    _budget(actor, tenant_a, thresholds=[80])
    budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=9 * DOLLAR, request_id="big-stream"
    )
    alert = BudgetAlert.objects.get(tenant=tenant_a)
    assert (alert.threshold, alert.spent_micros) == (80, 9 * DOLLAR)  # spent 0 + reserved 9
    # Settling it crosses nothing new: the 80 % alert is once per period.
    hold = budget_reserve(tenant=tenant_a, principal=admin_a, estimate_micros=0, request_id="tiny")
    budget_settle(reservation=hold, actual_micros=DOLLAR // 2)
    assert BudgetAlert.objects.filter(tenant=tenant_a).count() == 1


def test_the_api_the_budgets_page_and_the_tenant_page_show_the_same_figure(
    tenant_a, admin_a, actor
) -> None:
    budget = _budget(actor, tenant_a)
    done = budget_reserve(
        tenant=tenant_a, principal=admin_a, estimate_micros=DOLLAR, request_id="done"
    )
    budget_settle(reservation=done, actual_micros=1_234_567)
    book_micros(tenant_a, 1_234_567)
    budget_reserve(tenant=tenant_a, principal=admin_a, estimate_micros=2_500_000, request_id="open")
    client = Client()
    client.force_login(admin_a)
    period = client.get(f"/api/v1/tenants/{tenant_a.slug}/budgets/{budget.pk}").json()[
        "current_period"
    ]
    assert (period["spent_micros"], period["reserved_micros"]) == (1_234_567, 2_500_000)
    assert (period["remaining_micros"], period["alert_basis"]) == (6_265_433, "spent_plus_reserved")

    def shown(html: str, what: str) -> str:
        return re.search(rf'class="budget-{what}">([^<]+)<', html).group(1)

    budgets = client.get(f"/t/{tenant_a.slug}/budgets/").content.decode()
    overview = client.get(f"/t/{tenant_a.slug}/").content.decode()
    expected = {"spent": "$1.23", "reserved": "$2.50", "remaining": "$6.27", "committed": "$3.73"}
    for html in (budgets, overview):
        assert {k: shown(html, k) for k in expected} == expected
    tile = client.get(f"/api/v1/tenants/{tenant_a.slug}/console/summary").json()
    row = tile["spend"]["budgets"][0]
    assert (row["spent_usd"], row["reserved_usd"], row["remaining_usd"]) == (
        1.234567,
        2.5,
        6.265433,
    )
    assert "spent + reserved" in budgets
