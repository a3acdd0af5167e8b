"""The one booking path from the ledger to the budget counters.

Every cost is first a ledger fact: a ``UsageRecord`` row (gateway requests, batch
producers' rows, cache creations, warm-ups and probes) or a ``StorageAccrual`` row (cache
storage, as it accrues). The transaction that writes the fact calls :func:`ledger_book`
with the exact nano-USD it added, and that call — and nothing else — moves
``BudgetPeriod.spent_nanos`` (``spent_micros`` is its rounding, rewritten in the same
statement) and, after commit, the gateway's Redis counter (``spent_nanos`` of the
period's hash) by the same amount. Holds are reservations only: booking a gateway
request's row drops its hold (the hold id is the row's ledger key) in the same Redis
step, so each request reaches the counters exactly once, at its exact ledger cost.

Which periods a booking charges: every period of the tenant whose window contains the
booking's time, of a tenant-wide budget, or of the booking principal's own budget
(storage has no principal: tenant-wide budgets only). This is the rule
``billing.selectors.usage.tenant_spend_nanos`` sums by, so after any sequence of
bookings ``spent_nanos`` of a period equals Σ ledger + Σ storage of its window.

Writers serialize on the rollup advisory lock (``ROLLUP_LOCK``, taken by the flush, the
storage accrual, reprice and the creation of a period), so a period created mid-period
(seeded from the ledger) can neither miss nor double a booking committed beside it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

import redis
from django.db import connection, transaction

from billing.models import BudgetPeriod
from billing.pricing import nanos_to_micros
from billing.services.budget_alerts import budget_alerts_raise
from billing.services.budget_locks import budget_periods_lock

logger = logging.getLogger(__name__)

#: pg advisory lock id shared by every writer of the ledger, rollups and spend ("bill").
ROLLUP_LOCK = 0x62696C6C


def ledger_lock() -> None:
    """Take the ledger's advisory lock for the current transaction (see the module doc)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROLLUP_LOCK])


@dataclass(frozen=True)
class Booking:
    """Exact cost added to the ledger: whose, when (the time of the work) and how much.

    ``nanos`` may be negative (a price correction). ``hold_id``: the ledger key, which is
    also the id of the gateway hold that reserved this cost (dropped when booked).
    """

    tenant_id: str
    at: datetime
    nanos: int
    principal_id: str | None = None
    hold_id: str | None = None


@dataclass
class _Window:
    id: int
    start: datetime
    end: datetime
    principal_id: str | None


def _periods_of(entries: list[Booking]) -> dict[str, list[_Window]]:
    tenants = sorted({e.tenant_id for e in entries})
    earliest = min(e.at for e in entries)
    latest = max(e.at for e in entries)
    found: dict[str, list[_Window]] = defaultdict(list)
    # all_tenants: a booking batch spans tenants; each row is matched to its own tenant
    rows = (
        BudgetPeriod.objects.all_tenants()
        .filter(tenant_id__in=tenants, period_start__lte=latest, period_end__gt=earliest)
        .values_list("id", "tenant_id", "period_start", "period_end", "budget__principal_id")
    )
    for pk, tenant_id, start, end, principal_id in rows:
        found[str(tenant_id)].append(
            _Window(pk, start, end, str(principal_id) if principal_id else None)
        )
    return found


def ledger_book(*, entries: list[Booking]) -> dict[int, int]:
    """Charge bookings to the budget periods they fall in (PostgreSQL now, Redis after
    commit); returns period id → nanos charged. Must run inside the transaction that
    wrote the ledger facts, so a rollback books nothing."""
    if not entries:
        return {}
    windows = _periods_of(entries)
    charges: dict[int, int] = defaultdict(int)
    holds: dict[int, list[str]] = defaultdict(list)
    for entry in entries:
        for w in windows.get(entry.tenant_id, ()):
            if not w.start <= entry.at < w.end:
                continue
            if w.principal_id is not None and w.principal_id != entry.principal_id:
                continue
            charges[w.id] += entry.nanos
            if entry.hold_id and entry.hold_id.startswith("gw-"):
                holds[w.id].append(entry.hold_id)
    budget_periods_charge(charges_nanos=dict(charges))
    if charges:
        transaction.on_commit(
            partial(budget_live_book, charges_nanos=dict(charges), holds=dict(holds))
        )
    return dict(charges)


def budget_periods_charge(*, charges_nanos: dict[int, int]) -> None:
    """Add exact spend to period rows (period id → nanos) and raise crossed alerts.

    Lock order (``billing.services.budget_locks``): the budgets, then the periods, each in
    pk order; alerts per tenant in tenant-id order.
    """
    moved = []
    with connection.cursor() as cursor:
        for period_id in budget_periods_lock(period_ids=charges_nanos):
            nanos = charges_nanos[period_id]
            if not nanos:
                continue
            cursor.execute(
                "UPDATE billing_budgetperiod SET spent_nanos = spent_nanos + %s WHERE id = %s "
                "RETURNING id, budget_id, spent_nanos, limit_micros, tenant_id",
                [nanos, period_id],
            )
            row = cursor.fetchone()
            if row is None:
                continue
            new_micros, old_micros = nanos_to_micros(row[2]), nanos_to_micros(row[2] - nanos)
            cursor.execute(
                "UPDATE billing_budgetperiod SET spent_micros = %s WHERE id = %s",
                [new_micros, period_id],
            )
            moved.append(
                {
                    "period_id": row[0],
                    "budget_id": row[1],
                    "old_spent": old_micros,
                    "new_spent": new_micros,
                    "limit": row[3],
                    "tenant_id": row[4],
                }
            )
    by_tenant: dict[UUID | str, list[dict[str, Any]]] = {}
    for m in moved:
        by_tenant.setdefault(m["tenant_id"], []).append(m)
    for tenant_id, rows in sorted(by_tenant.items(), key=lambda item: str(item[0])):
        budget_alerts_raise(tenant_id=tenant_id, moved=rows)


def budget_live_book(*, charges_nanos: dict[int, int], holds: dict[int, list[str]]) -> int:
    """Mirror bookings onto the loaded Redis counters (after commit): per period, drop
    the booked requests' holds and add the exact nanos, in one atomic step. An unloaded
    period is skipped (it is seeded from PostgreSQL, which has the booking, on its next
    load). Redis down: logged; the holds expire and the next load reseeds."""
    from controlplane import ops
    from controlplane.redis.budget import budget_book

    moving = sorted(set(charges_nanos) | set(holds))
    if not moving:
        return 0
    try:
        client = ops.redis_client()
        return sum(
            budget_book(
                client,
                period_id=period_id,
                nanos=charges_nanos.get(period_id, 0),
                hold_ids=holds.get(period_id, []),
            )
            for period_id in moving
        )
    except redis.RedisError:
        logger.warning("bookings not mirrored to Redis: %s", charges_nanos, exc_info=True)
        return 0
