"""The gateway's Celery tasks: thin adapters over one service each (cadences in celery.py)."""

from __future__ import annotations

from celery import shared_task

from billing.services.budget_reservations import budget_holds_expire, budget_settlements_flush
from controlplane.task_health import LOCK_CONFLICT_RETRY, lock_conflicts_retried


@shared_task(
    name="gateway.tasks.budget_settlements_flush_task", ignore_result=True, **LOCK_CONFLICT_RETRY
)
def budget_settlements_flush_task() -> int:
    """Book settled gateway holds into budget periods (idempotent: replays insert nothing).

    A deadlock or serialization failure is retried with jitter (controlplane.task_health);
    the batch stays claimed in Redis and the retry books it.
    """
    with lock_conflicts_retried():
        return budget_settlements_flush().inserted


@shared_task(
    name="gateway.tasks.budget_holds_expire_task", ignore_result=True, **LOCK_CONFLICT_RETRY
)
def budget_holds_expire_task() -> int:
    """Drop expired gateway holds (a crashed gateway's) on every known period.

    A deadlock or serialization failure is retried with jitter (controlplane.task_health).
    """
    with lock_conflicts_retried():
        return budget_holds_expire()
