"""Budgets: race-free reservations, settlement, alerts, expiry of forgotten holds.

Reservation algorithm (the hard limit holds before any work is done):
1. find the tenant's active budgets that apply to the caller (tenant-wide, plus the
   caller's service-account budget) and whose period covers now; make sure each has a
   ``BudgetPeriod`` row (``INSERT ... ON CONFLICT DO NOTHING``, seeded with the ledger's
   spend so far when a budget starts mid-period);
2. in one transaction, insert the reservation (unique per ``(tenant, request_id)``: a
   replay returns the first reservation) and, period by period in id order (a fixed
   lock order, so no deadlocks), run one conditional statement::

       UPDATE billing_budgetperiod SET reserved_micros = reserved_micros + x
       WHERE id = p AND (NOT hard_limit OR spent_micros + reserved_micros + x <= limit_micros)

   PostgreSQL serializes writers on the row and re-checks the condition against the
   latest committed version, so N concurrent requests can never reserve past the limit;
   a refusal rolls back every hold already taken and raises ``budget_exceeded`` (402);
3. settlement drops the hold and records the actual cost on the reservation; release
   drops it too, and a beat task expires holds nobody came back for. Neither adds
   spend: spend reaches ``spent_nanos`` only through the ledger's booking path
   (``billing.services.ledger_booking``), when the cost is booked (a cache's storage as
   it accrues, which also shrinks its storage hold), so no cost is ever counted twice.

Which budgets apply and their period rows: ``billing.services.budget_periods``; the
threshold alerts a settlement raises: ``billing.services.budget_alerts``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from audit.services.denials import audit_denial
from billing.errors import BudgetExceeded, BudgetNearLimit, InvalidUsage
from billing.models import (
    BudgetPeriod,
    BudgetReservation,
    ReservationState,
)
from billing.services.budget_alerts import budget_alerts_raise
from billing.services.budget_crud import (  # noqa: F401 - the gateway imports these here
    DEFAULT_THRESHOLDS,
    budget_archive,
    budget_create,
    budget_rotate_secret,
    budget_update,
)
from billing.services.budget_locks import budget_periods_lock
from billing.services.budget_periods import budget_period_ensure, budgets_applicable
from billing.services.storage import storage_estimate_micros
from tenants.actor import Actor, AuthMethod
from tenants.models import Principal, Tenant

CACHE_RESERVATION_GRACE = timedelta(hours=1)


def _denial_actor(principal: Principal | None) -> Actor:
    return Actor(principal=principal, auth_method=AuthMethod.SYSTEM, user_agent="billing")


def budget_reserve(
    *,
    tenant: Tenant,
    principal: Principal | None,
    estimate_micros: int,
    request_id: str,
    ttl: timedelta | None = None,
    kind: str = "request",
    actor: Actor | None = None,
) -> BudgetReservation | None:
    """Hold ``estimate_micros`` on every budget that applies, or refuse (before any work).

    Returns the reservation, or None when no budget applies (nothing is held). A replay
    of ``request_id`` returns the first reservation. Raises BudgetExceeded (402) when a
    hard budget would go over its limit; the refusal is audited (outcome ``denied``).
    Not audited on success: this is the per-request hot path; the ledger records it.
    """
    if not isinstance(estimate_micros, int) or estimate_micros < 0:
        raise InvalidUsage("estimate_micros must be a non-negative integer.")
    if not request_id or len(request_id) > 128:
        raise InvalidUsage("request_id must be 1-128 characters.")
    now = timezone.now()
    ttl = ttl or timedelta(seconds=settings.CACHEPLANE_BILLING_RESERVATION_TTL_SECONDS)
    principal_id = principal.pk if principal is not None else None
    budgets = budgets_applicable(tenant=tenant, principal_id=principal_id, at=now)
    if not budgets:
        return None
    reservation = BudgetReservation(
        tenant=tenant,
        principal_id=principal_id,
        request_id=request_id,
        kind=kind,
        amount_micros=estimate_micros,
        expires_at=now + ttl,
    )
    periods = sorted(
        (p for p in (budget_period_ensure(budget=b, at=now) for b in budgets) if p is not None),
        key=lambda p: p.pk,
    )
    reservation.period_ids = [p.pk for p in periods]
    thresholds = {b.pk: b.thresholds for b in budgets}
    refused: BudgetPeriod | None = None
    with transaction.atomic():
        try:
            with transaction.atomic():
                reservation.save(force_insert=True)
        except IntegrityError:
            # A replay (or a concurrent duplicate, which waited for the first to commit).
            return BudgetReservation.objects.get(tenant=tenant, request_id=request_id)
        budget_periods_lock(period_ids=reservation.period_ids)
        moved = []
        with connection.cursor() as cursor:
            for period in periods:
                cursor.execute(
                    "UPDATE billing_budgetperiod SET reserved_micros = reserved_micros + %s "
                    "WHERE id = %s AND (NOT hard_limit OR "
                    "spent_micros + reserved_micros + %s <= limit_micros) "
                    "RETURNING id, budget_id, spent_micros, limit_micros, reserved_micros",
                    [estimate_micros, period.pk, estimate_micros],
                )
                row = cursor.fetchone()
                if row is None:
                    refused = period
                    break
                if _crosses(thresholds.get(row[1], []), row[2] + row[4], estimate_micros, row[3]):
                    moved.append(
                        {
                            "period_id": row[0],
                            "budget_id": row[1],
                            "new_spent": row[2],
                            "limit": row[3],
                        }
                    )
        if refused is not None:
            transaction.set_rollback(True)
        elif moved:
            # Alerts count spent + reserved: a hold can cross a threshold by itself.
            budget_alerts_raise(tenant_id=tenant.pk, moved=moved)
    if refused is None:
        return reservation
    refused.refresh_from_db()
    details = {
        "budget": str(refused.budget_id),
        "limit_micros": refused.limit_micros,
        "spent_micros": refused.spent_micros,
        "reserved_micros": refused.reserved_micros,
        "estimate_micros": estimate_micros,
    }
    # Its own transaction (audit.services.denials): the caller's rollback, e.g. of a
    # refused cache-create, must not erase the evidence of the refusal.
    audit_denial(
        actor=actor or _denial_actor(principal),
        action="billing.budget.exceeded",
        tenant=tenant,
        target_type="budget",
        target_id=str(refused.budget_id),
        details={**details, "request_id": request_id},
    )
    raise BudgetExceeded("The request would exceed the budget's hard limit.", details=details)


def _crosses(thresholds: list[int], committed: int, added: int, limit: int) -> bool:
    """Did adding ``added`` take spent + reserved across a threshold (integer maths)?
    Keeps the hot path free of alert queries unless one may be due."""
    return any((committed - added) * 100 < t * limit <= committed * 100 for t in thresholds)


def budget_reserve_cache_storage(
    *,
    tenant: Tenant,
    principal: Principal | None,
    request_id: str,
    provider: str,
    model: str,
    tokens: int,
    ttl: timedelta,
    pool: str = "",
    actor: Actor | None = None,
) -> BudgetReservation | None:
    """Reserve the storage cost of a cache for its requested TTL (before creating it).

    The hold lasts the TTL plus a grace hour; the caches app settles it with the accrued
    storage when the cache ends (or releases it if creation fails). A tenant at
    ``NEAR_BUDGET`` (90 %) of a hard budget gets no new pin: BudgetNearLimit (402,
    audited), the autopilot's budget coupling. Raises BudgetExceeded, BudgetNearLimit,
    PriceNotFound.
    """
    _pins_allowed_or_raise(tenant=tenant, principal=principal, request_id=request_id, actor=actor)
    estimate = storage_estimate_micros(
        provider=provider, model=model, pool=pool, tokens=tokens, ttl=ttl, at=timezone.now()
    )
    return budget_reserve(
        tenant=tenant,
        principal=principal,
        estimate_micros=estimate,
        request_id=request_id,
        ttl=ttl + CACHE_RESERVATION_GRACE,
        kind="cache_storage",
        actor=actor,
    )


def _pins_allowed_or_raise(
    *, tenant: Tenant, principal: Principal | None, request_id: str, actor: Actor | None
) -> None:
    from billing.ttl_policy import NEAR_BUDGET

    now = timezone.now()
    principal_id = principal.pk if principal is not None else None
    for budget in budgets_applicable(tenant=tenant, principal_id=principal_id, at=now):
        if not budget.hard_limit:
            continue
        period = budget_period_ensure(budget=budget, at=now)
        if period is None or period.limit_micros <= 0:
            continue
        used = period.spent_micros + period.reserved_micros
        if used * 100 < int(NEAR_BUDGET * 100) * period.limit_micros:
            continue
        details = {
            "budget": str(budget.pk),
            "limit_micros": period.limit_micros,
            "spent_micros": period.spent_micros,
            "reserved_micros": period.reserved_micros,
            "near_budget_percent": int(NEAR_BUDGET * 100),
        }
        # A denial outlives the caller's rollback (the cache create is rolled back).
        audit_denial(
            actor=actor or _denial_actor(principal),
            action="billing.budget.pin_refused",
            tenant=tenant,
            target_type="budget",
            target_id=str(budget.pk),
            details={**details, "request_id": request_id},
        )
        raise BudgetNearLimit(
            "The tenant is near a hard budget's limit: no new caches until it recovers.",
            details=details,
        )


def _move(reservation: BudgetReservation, *, release: int, spend: int) -> list[dict[str, Any]]:
    """Apply -release to reserved (and +spend µ$, always 0 now that spend comes from the
    ledger) on each period; return the rows."""
    moved = []
    with connection.cursor() as cursor:
        for period_id in budget_periods_lock(period_ids=reservation.period_ids):
            cursor.execute(
                "UPDATE billing_budgetperiod SET reserved_micros = reserved_micros - %s, "
                "spent_micros = spent_micros + %s WHERE id = %s "
                "RETURNING id, budget_id, spent_micros, limit_micros",
                [release, spend, period_id],
            )
            row = cursor.fetchone()
            if row is not None:
                moved.append(
                    {
                        "period_id": row[0],
                        "budget_id": row[1],
                        "old_spent": row[2] - spend,
                        "new_spent": row[2],
                        "limit": row[3],
                    }
                )
    return moved


def budget_settle(*, reservation: BudgetReservation, actual_micros: int) -> BudgetReservation:
    """Drop the hold and record the actual cost (idempotent: a second settle is a no-op).

    Spends nothing: the cost the hold reserved is booked through the ledger
    (``billing.services.ledger_booking``; a cache's storage accrues there as it runs), so
    settling it here too would count it twice. ``actual_micros`` is kept on the
    reservation as the record of what the hold covered.
    """
    if not isinstance(actual_micros, int) or actual_micros < 0:
        raise InvalidUsage("actual_micros must be a non-negative integer.")
    with transaction.atomic():
        # all_tenants: a row loaded by id (or due rows of every tenant); tenant is on the row
        locked = BudgetReservation.objects.all_tenants().select_for_update().get(pk=reservation.pk)
        if locked.state in (ReservationState.SETTLED, ReservationState.RELEASED):
            return locked
        release = locked.amount_micros if locked.state == ReservationState.HELD else 0
        if release:
            _move(locked, release=release, spend=0)
        locked.state = ReservationState.SETTLED
        locked.actual_micros = actual_micros
        locked.finished_at = timezone.now()
        locked.save(update_fields=["state", "actual_micros", "finished_at"])
    return locked


def budget_hold_consume(*, tenant_id: UUID | str, request_id: str, micros: int) -> int:
    """Shrink a held PostgreSQL reservation by cost just booked against it (a cache's
    storage as it accrues): the hold keeps reserving only what is still to come, so hold
    plus spend never counts a booked cost twice. Returns the µ$ released (0: no hold)."""
    if micros <= 0:
        return 0
    with transaction.atomic():
        locked = (
            BudgetReservation.objects.select_for_update()
            .filter(tenant_id=tenant_id, request_id=request_id, state=ReservationState.HELD)
            .first()
        )
        if locked is None or locked.amount_micros <= 0:
            return 0
        release = min(micros, locked.amount_micros)
        _move(locked, release=release, spend=0)
        BudgetReservation.objects.filter(pk=locked.pk, tenant_id=tenant_id).update(
            amount_micros=locked.amount_micros - release
        )
    return release


def budget_release(*, reservation: BudgetReservation) -> BudgetReservation:
    """Drop a hold without charging (the request failed before costing anything)."""
    with transaction.atomic():
        # all_tenants: a row loaded by id (or due rows of every tenant); tenant is on the row
        locked = BudgetReservation.objects.all_tenants().select_for_update().get(pk=reservation.pk)
        if locked.state != ReservationState.HELD:
            return locked
        _move(locked, release=locked.amount_micros, spend=0)
        locked.state = ReservationState.RELEASED
        locked.finished_at = timezone.now()
        locked.save(update_fields=["state", "finished_at"])
    return locked


def budget_reservations_expire(*, now: datetime | None = None, limit: int | None = None) -> int:
    """Release up to ``limit`` holds past their expiry; returns how many (0: nothing due).

    ``FOR UPDATE SKIP LOCKED`` lets concurrent sweepers split the work and never waits
    on a reservation being settled right now.
    """
    now = now or timezone.now()
    limit = limit or settings.CACHEPLANE_BILLING_EXPIRE_BATCH
    with transaction.atomic():
        due = list(
            # all_tenants: a row loaded by id (or due rows of every tenant); tenant is on the row
            BudgetReservation.objects.all_tenants()
            .select_for_update(skip_locked=True)
            .filter(state=ReservationState.HELD, expires_at__lt=now)
            .order_by("expires_at")[:limit]
        )
        # One statement per period, all of them locked up front in the lock order
        # (budget_locks): moving reservation by reservation would lock the periods of a
        # batch in expiry order and could deadlock with a settlement flush.
        releases: dict[int, int] = {}
        for reservation in due:
            for period_id in set(reservation.period_ids):
                releases[period_id] = releases.get(period_id, 0) + reservation.amount_micros
        with connection.cursor() as cursor:
            for period_id in budget_periods_lock(period_ids=releases):
                cursor.execute(
                    "UPDATE billing_budgetperiod SET reserved_micros = reserved_micros - %s "
                    "WHERE id = %s",
                    [releases[period_id], period_id],
                )
        # all_tenants: a row loaded by id (or due rows of every tenant); tenant is on the row
        BudgetReservation.objects.all_tenants().filter(pk__in=[r.pk for r in due]).update(
            state=ReservationState.EXPIRED, finished_at=now
        )
    return len(due)
