"""The gateway's Celery tasks: thin adapters over one service each (cadences in celery.py)."""

from __future__ import annotations

from celery import shared_task

from billing.services.budget_reservations import budget_holds_expire, budget_settlements_flush


@shared_task(name="gateway.tasks.budget_settlements_flush_task", ignore_result=True)
def budget_settlements_flush_task() -> int:
    """Book settled gateway holds into budget periods (idempotent: replays insert nothing)."""
    return budget_settlements_flush().inserted


@shared_task(name="gateway.tasks.budget_holds_expire_task", ignore_result=True)
def budget_holds_expire_task() -> int:
    """Drop expired gateway holds (a crashed gateway's) on every known period."""
    return budget_holds_expire()
