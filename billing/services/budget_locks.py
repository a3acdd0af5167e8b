"""Level 4 of the lock order (``caches.services.locks``): budgets, then their periods.

Every transaction that writes a ``BudgetPeriod`` row locks, in this order:

1. the **budgets** of those periods, in primary-key order: ``FOR NO KEY UPDATE`` by a
   budget's editors (REST create/PATCH/archive/rotate), ``FOR KEY SHARE`` by everything
   that only moves counters (holds, settlements, the hold flush, the storage sweeper,
   expiry, reprice). The two modes do not conflict, so a PATCH never blocks a
   settlement on the budget row and a settlement never blocks a PATCH; taking the
   ``KEY SHARE`` up front (not at ``COMMIT``, where Django's deferred foreign-key check
   of a new ``BudgetAlert`` would take it) fixes its place in the order;
2. the **budget periods**, in primary-key order, ``FOR NO KEY UPDATE`` (never
   ``FOR UPDATE``: that would block the ``FOR KEY SHARE`` of every alert insert).

The deadlock this order removes (issue 29): the settlement flush updated a period and,
at ``COMMIT``, checked the foreign key of the alert it had raised (``SELECT 1 FROM
billing_budget ... FOR KEY SHARE``), while a budget PATCH held that budget ``FOR UPDATE``
and waited to update the same period. Each waited for the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from uuid import UUID

from django.db import connection

from billing.models import Budget, BudgetPeriod


def budget_periods_lock(*, period_ids: Iterable[int]) -> list[int]:
    """Lock the periods' budgets (``FOR KEY SHARE``) and then the periods themselves
    (``FOR NO KEY UPDATE``), each in primary-key order; returns the ids that exist, sorted.

    For writers that move a period's counters. Must run inside a transaction.
    """
    ids = sorted(set(period_ids))
    if not ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT b.id FROM {Budget._meta.db_table} b WHERE b.id IN "
            f"(SELECT budget_id FROM {BudgetPeriod._meta.db_table} WHERE id = ANY(%s)) "
            "ORDER BY b.id FOR KEY SHARE",
            [ids],
        )
        cursor.execute(
            f"SELECT id FROM {BudgetPeriod._meta.db_table} WHERE id = ANY(%s) "
            "ORDER BY id FOR NO KEY UPDATE",
            [ids],
        )
        return [row[0] for row in cursor.fetchall()]


def budget_lock_for_edit(
    *, budget_id: UUID | str, tenant_id: UUID | str, periods_ending_after: datetime | None = None
) -> tuple[Budget, list[int]]:
    """Lock a budget for its editor (``FOR NO KEY UPDATE``) and, with
    ``periods_ending_after``, then its periods ending after that moment (``FOR NO KEY
    UPDATE``, primary-key order); returns the budget and those period ids.

    Raises ``Budget.DoesNotExist``. Must run inside a transaction.
    """
    budget = Budget.objects.select_for_update(no_key=True).get(pk=budget_id, tenant_id=tenant_id)
    if periods_ending_after is None:
        return budget, []
    period_ids = list(
        BudgetPeriod.objects.filter(
            tenant_id=tenant_id, budget_id=budget_id, period_end__gt=periods_ending_after
        )
        .order_by("pk")
        .select_for_update(no_key=True)
        .values_list("pk", flat=True)
    )
    return budget, period_ids
