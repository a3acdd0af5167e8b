"""Budget CRUD: create, change, archive budgets and rotate their webhook secrets.

Each write is one transaction with its audit event (``billing.budget.<verb>``; the
webhook secret is redacted in audit rows). Reservations and alerts live in
``billing.services.budgets``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlparse

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot
from billing.errors import InvalidBudget, InvalidPeriod, InvalidThreshold
from billing.models import Budget, BudgetPeriod, BudgetPeriodKind, _new_webhook_secret
from billing.services.budget_locks import budget_lock_for_edit
from billing.services.budget_periods import budget_period_ensure
from tenants.actor import Actor
from tenants.errors import UnknownPrincipal
from tenants.models import Principal, PrincipalKind, Tenant

MAX_LIMIT_MICROS = 10**15  # a billion dollars: anything above is a typo
MAX_THRESHOLDS = 10
DEFAULT_THRESHOLDS = (50, 80, 100)


def _clean_thresholds(thresholds: Any) -> list[int]:
    if not isinstance(thresholds, list | tuple) or len(thresholds) > MAX_THRESHOLDS:
        raise InvalidThreshold(f"thresholds must be a list of at most {MAX_THRESHOLDS}.")
    for t in thresholds:
        if not isinstance(t, int) or isinstance(t, bool) or not 1 <= t <= 100:
            raise InvalidThreshold(
                "Each threshold is a whole percentage from 1 to 100.", details={"value": t}
            )
    return sorted(set(thresholds))


def _clean_limit(limit_micros: Any) -> int:
    if not isinstance(limit_micros, int) or isinstance(limit_micros, bool):
        raise InvalidBudget("limit_micros must be an integer number of micro-USD.")
    if not 0 < limit_micros <= MAX_LIMIT_MICROS:
        raise InvalidBudget("limit_micros must be positive (and below 10^15).")
    return limit_micros


def _clean_webhook(url: str) -> str:
    if not url:
        return ""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or len(url) > 500:
        raise InvalidBudget("webhook_url must be an http(s) URL of at most 500 characters.")
    return url


def _clean_name(name: Any) -> str:
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 100:
        raise InvalidBudget("name must be 1-100 characters.")
    return name.strip()


def budget_create(
    *,
    actor: Actor,
    tenant: Tenant,
    name: str,
    period: str,
    limit_micros: int,
    thresholds: list[int] | tuple[int, ...] = DEFAULT_THRESHOLDS,
    hard_limit: bool = True,
    principal_id: str | None = None,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    webhook_url: str = "",
) -> Budget:
    """Create a budget (its webhook secret is readable on the returned object only).

    Raises InvalidPeriod, InvalidThreshold, InvalidBudget, UnknownPrincipal. Audited as
    ``billing.budget.create`` (the secret redacted).
    """
    if period not in BudgetPeriodKind.values:
        raise InvalidPeriod(
            f"Unknown period {period!r}; use day, month or custom.", details={"period": period}
        )
    if period == BudgetPeriodKind.CUSTOM:
        if starts_at is None or ends_at is None or ends_at <= starts_at:
            raise InvalidPeriod("A custom period needs starts_at before ends_at.")
    elif starts_at is not None or ends_at is not None:
        raise InvalidPeriod("starts_at and ends_at apply to custom periods only.")
    principal = None
    if principal_id is not None:
        principal = Principal.objects.filter(
            pk=principal_id, tenant=tenant, kind=PrincipalKind.SERVICE
        ).first()
        if principal is None:
            raise UnknownPrincipal(
                f"Unknown service account {principal_id}.", details={"principal": principal_id}
            )
    budget = Budget(
        tenant=tenant,
        principal=principal,
        name=_clean_name(name),
        period=period,
        starts_at=starts_at,
        ends_at=ends_at,
        limit_micros=_clean_limit(limit_micros),
        thresholds=_clean_thresholds(thresholds),
        hard_limit=bool(hard_limit),
        webhook_url=_clean_webhook(webhook_url),
        created_by=actor.principal,
    )
    with transaction.atomic():
        budget.save(force_insert=True)
        audit_record(
            actor=actor,
            action="billing.budget.create",
            tenant=tenant,
            target_type="budget",
            target_id=str(budget.pk),
            changes=diff(EMPTY, model_snapshot(budget)),
        )
    budget_period_ensure(budget=budget, at=timezone.now())
    return budget


def budget_update(*, actor: Actor, budget: Budget, changes: dict[str, Any]) -> Budget:
    """Change name, limit, thresholds, hard limit or webhook URL (not the period).

    The current and future periods take the new limit at once. Raises InvalidBudget,
    InvalidThreshold, InvalidPeriod (a period change: create a new budget instead).
    """
    allowed = {"name", "limit_micros", "thresholds", "hard_limit", "webhook_url"}
    if {"period", "starts_at", "ends_at"} & set(changes):
        raise InvalidPeriod("A budget's period cannot change; create a new budget.")
    unknown = set(changes) - allowed
    if unknown:
        raise InvalidBudget(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        # Lock order (billing.services.budget_locks): the budget, then the periods that
        # take the new limit, in pk order; NO KEY so settlements are never blocked on it.
        locked, period_ids = budget_lock_for_edit(
            budget_id=budget.pk, tenant_id=budget.tenant_id, periods_ending_after=timezone.now()
        )
        before = model_snapshot(locked)
        if "name" in changes:
            locked.name = _clean_name(changes["name"])
        if "limit_micros" in changes:
            locked.limit_micros = _clean_limit(changes["limit_micros"])
        if "thresholds" in changes:
            locked.thresholds = _clean_thresholds(changes["thresholds"])
        if "hard_limit" in changes:
            locked.hard_limit = bool(changes["hard_limit"])
        if "webhook_url" in changes:
            locked.webhook_url = _clean_webhook(changes["webhook_url"] or "")
        locked.save()
        BudgetPeriod.objects.filter(tenant_id=locked.tenant_id, pk__in=period_ids).update(
            limit_micros=locked.limit_micros, hard_limit=locked.hard_limit
        )
        audit_record(
            actor=actor,
            action="billing.budget.update",
            tenant=locked.tenant,
            target_type="budget",
            target_id=str(locked.pk),
            changes=diff(before, model_snapshot(locked)),
        )
    return locked


def budget_archive(*, actor: Actor, budget: Budget) -> Budget:
    """Stop enforcing a budget (kept, with its periods and alerts, for history)."""
    with transaction.atomic():
        locked, _ = budget_lock_for_edit(budget_id=budget.pk, tenant_id=budget.tenant_id)
        before = model_snapshot(locked)
        if locked.archived_at is None:
            locked.archived_at = timezone.now()
            locked.save(update_fields=["archived_at", "updated_at"])
        audit_record(
            actor=actor,
            action="billing.budget.delete",
            tenant=locked.tenant,
            target_type="budget",
            target_id=str(locked.pk),
            changes=diff(before, model_snapshot(locked)),
        )
    return locked


def budget_rotate_secret(*, actor: Actor, budget: Budget) -> Budget:
    """Issue a new webhook signing secret (readable on the returned object only)."""
    with transaction.atomic():
        locked, _ = budget_lock_for_edit(budget_id=budget.pk, tenant_id=budget.tenant_id)
        before = model_snapshot(locked)
        locked.webhook_secret = _new_webhook_secret()
        locked.save(update_fields=["webhook_secret", "updated_at"])
        audit_record(
            actor=actor,
            action="billing.budget.rotate_secret",
            tenant=locked.tenant,
            target_type="budget",
            target_id=str(locked.pk),
            changes=diff(before, model_snapshot(locked)),
        )
    return locked
