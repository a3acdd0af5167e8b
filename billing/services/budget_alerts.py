"""Budget threshold alerts: one alert row per threshold a period's spent + reserved reaches.

Called inside the transaction that moved the spend (settlement, the hold flush), so the
alert, its audit event and the spend commit together; the live event and the webhook
delivery task go out after commit.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import connection

from audit.services import audit_record
from billing.models import Budget, BudgetAlert, BudgetPeriod, WebhookState
from billing.selectors.budgets import ALERT_BASIS, budget_periods_gateway_reserved
from controlplane.task_queue import task_enqueue_on_commit
from tenants.actor import Actor

#: Enqueued by name (controlplane.task_queue): the task imports this module, not back.
ALERT_DELIVER_TASK = "billing.tasks.budget_alert_deliver_task"


def budget_alerts_raise(*, tenant_id: UUID | str, moved: list[dict[str, Any]]) -> list[BudgetAlert]:
    """Insert one alert per threshold that spent + reserved has reached (once per period).

    ``moved``: the period rows a write just changed (``period_id``, ``budget_id``,
    ``new_spent``, ``limit``), read back inside that write's transaction. The basis is
    ``billing.selectors.budgets.ALERT_BASIS``, spent + reserved, the sum the hard limit
    and every meter compare, so an alert fires no later than the first refusal. The
    unique key (period, threshold) makes each alert once only, whatever the caller.
    """
    raised: list[BudgetAlert] = []
    if not moved:
        return raised
    period_ids = [m["period_id"] for m in moved]
    # all_tenants: rows loaded by id within the caller's transaction; tenant is on the row
    reserved = dict(
        BudgetPeriod.objects.all_tenants()
        .filter(pk__in=period_ids)
        .values_list("pk", "reserved_micros")
    )
    # Plus the gateway's holds in Redis: the same reserved as the one budget figure
    # (billing.selectors.budget_figures) and the gateway's hard limit.
    for period_id, held in budget_periods_gateway_reserved(period_ids=period_ids).items():
        reserved[period_id] = reserved.get(period_id, 0) + held
    already = set(
        BudgetAlert.objects.all_tenants()
        .filter(period_id__in=period_ids)
        .values_list("period_id", "threshold")
    )
    # all_tenants: a row loaded by id (or due rows of every tenant); tenant is on the row
    budgets = Budget.objects.all_tenants().in_bulk([m["budget_id"] for m in moved])
    for m in moved:
        budget = budgets[m["budget_id"]]
        held = reserved.get(m["period_id"], 0)
        committed = m["new_spent"] + held
        for threshold in sorted(budget.thresholds):
            # Integer comparison: committed/limit >= t% without any float.
            if (m["period_id"], threshold) in already or threshold * m["limit"] > committed * 100:
                continue
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO billing_budgetalert (id, tenant_id, budget_id, period_id, "
                    "threshold, spent_micros, limit_micros, created_at, webhook_state, "
                    "webhook_attempts, webhook_last_error) "
                    "VALUES (gen_random_uuid(), %s, %s, %s, %s, %s, %s, now(), %s, 0, '') "
                    "ON CONFLICT (tenant_id, period_id, threshold) DO NOTHING RETURNING id",
                    [
                        tenant_id,
                        budget.pk,
                        m["period_id"],
                        threshold,
                        committed,
                        m["limit"],
                        WebhookState.PENDING if budget.webhook_url else WebhookState.NONE,
                    ],
                )
                row = cursor.fetchone()
            if row is None:
                continue
            # all_tenants: a row loaded by id (or due rows of every tenant); tenant is on the row
            alert = BudgetAlert.objects.all_tenants().select_related("tenant").get(pk=row[0])
            audit_record(
                actor=Actor.system("billing"),
                action="billing.budget.threshold_crossed",
                tenant=alert.tenant,
                target_type="budget",
                target_id=str(budget.pk),
                details={
                    "threshold": threshold,
                    "basis": ALERT_BASIS,
                    "spent_micros": m["new_spent"],
                    "reserved_micros": held,
                    "limit_micros": m["limit"],
                    "alert": str(alert.pk),
                },
            )
            from controlplane.live import platform_group, publish_on_commit, tenant_group

            event = {
                "budget": budget.name,
                "threshold": threshold,
                "tenant": alert.tenant.slug,
                "spent_micros": m["new_spent"],
                "reserved_micros": held,
                "basis": ALERT_BASIS,
                "limit_micros": m["limit"],
            }
            publish_on_commit(tenant_group(tenant_id, "alerts"), "billing.alert", event)
            publish_on_commit(platform_group("alerts"), "billing.alert", event)
            if budget.webhook_url:
                task_enqueue_on_commit(ALERT_DELIVER_TASK, str(alert.pk))
            raised.append(alert)
    return raised
