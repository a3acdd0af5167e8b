"""Budget threshold alerts: one alert row per threshold a period's spend newly crosses.

Called inside the transaction that moved the spend (settlement, the hold flush), so the
alert, its audit event and the spend commit together; the live event and the webhook
delivery task go out after commit.
"""

from __future__ import annotations

from functools import partial
from typing import Any
from uuid import UUID

from django.db import connection, transaction

from audit.services import audit_record
from billing.models import Budget, BudgetAlert, WebhookState
from tenants.actor import Actor


def budget_alerts_raise(*, tenant_id: UUID | str, moved: list[dict[str, Any]]) -> list[BudgetAlert]:
    """Insert one alert per threshold newly crossed (the unique key makes it once only)."""
    raised: list[BudgetAlert] = []
    crossing = [m for m in moved if m["new_spent"] > m["old_spent"]]
    if not crossing:
        return raised
    # all_tenants: a row loaded by id (or due rows of every tenant); tenant is on the row
    budgets = Budget.objects.all_tenants().in_bulk([m["budget_id"] for m in crossing])
    for m in crossing:
        budget = budgets[m["budget_id"]]
        for threshold in sorted(budget.thresholds):
            # Integer comparison: spent/limit >= t% without any float.
            if not m["old_spent"] * 100 < threshold * m["limit"] <= m["new_spent"] * 100:
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
                        m["new_spent"],
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
                    "spent_micros": m["new_spent"],
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
                "limit_micros": m["limit"],
            }
            publish_on_commit(tenant_group(tenant_id, "alerts"), "billing.alert", event)
            publish_on_commit(platform_group("alerts"), "billing.alert", event)
            if budget.webhook_url:
                from billing.tasks import budget_alert_deliver_task

                transaction.on_commit(partial(budget_alert_deliver_task.delay, str(alert.pk)))
            raised.append(alert)
    return raised
