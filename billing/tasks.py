"""Billing's Celery tasks: thin adapters over one service each (cadences in celery.py)."""

from __future__ import annotations

from celery import shared_task

from billing.models import BudgetAlert
from billing.services.alerts import WebhookTransientError, budget_alert_deliver
from billing.services.budgets import budget_reservations_expire
from billing.services.usage import usage_flush
from controlplane.celery import TRANSIENT_RETRY_POLICY
from controlplane.task_health import LOCK_CONFLICT_RETRY, lock_conflicts_retried


@shared_task(name="billing.tasks.usage_flush_task", ignore_result=True, **LOCK_CONFLICT_RETRY)
def usage_flush_task() -> int:
    """Drain the usage queue into the ledger and rollups (idempotent; a batch at a time).

    A deadlock or serialization failure is retried with jitter (controlplane.task_health);
    the claimed batch stays in Redis and the retry books it (replays insert nothing).
    """
    with lock_conflicts_retried():
        return usage_flush().inserted


@shared_task(
    name="billing.tasks.budget_reservations_expire_task", ignore_result=True, **LOCK_CONFLICT_RETRY
)
def budget_reservations_expire_task() -> int:
    """Release holds nobody settled; a full batch re-enqueues itself (fan out by batch).

    A deadlock or serialization failure is retried with jitter (controlplane.task_health).
    """
    from django.conf import settings

    with lock_conflicts_retried():
        released = budget_reservations_expire()
    if released >= settings.CACHEPLANE_BILLING_EXPIRE_BATCH:
        budget_reservations_expire_task.delay()
    return released


@shared_task(
    name="billing.tasks.budget_alert_deliver_task",
    ignore_result=True,
    autoretry_for=(WebhookTransientError,),
    **TRANSIENT_RETRY_POLICY,
)
def budget_alert_deliver_task(alert_id: str) -> str | None:
    """POST one budget alert's webhook; a delivered or failed alert is left alone."""
    # all_tenants: a task loads its row by id; the tenant comes from the row
    alert = (
        BudgetAlert.objects.all_tenants()
        .select_related("budget", "period", "tenant")
        .filter(pk=alert_id)
        .first()
    )
    if alert is None:
        return None
    return budget_alert_deliver(alert=alert)
