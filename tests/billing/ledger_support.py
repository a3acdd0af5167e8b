"""Helpers for the money-path tests: requests booked the way the gateway books them, and
the four figures that must agree (REST, PostgreSQL, Redis, Σ ledger + Σ storage)."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

from django.db.models import Q, Sum

from billing.models import Budget, BudgetPeriod, StorageAccrual, UsageRecord
from billing.services import budget_reservations as holds
from billing.services.usage import usage_record
from controlplane import ops
from controlplane.redis.budget import budget_reserve, budget_settle

FLASH_LITE = "gemini-2.5-flash-lite"  # $0.10/M input: 5 prompt tokens = 500 n$ = 0.5 µ$


def gateway_request(
    tenant,
    *,
    at: datetime,
    prompt_tokens: int = 5,
    hold_micros: int = 10,
    principal=None,
    periods: list[holds.PeriodView] | None = None,
    timed_out: bool = False,
) -> str:
    """One request as the gateway runs it: hold (reserve script), settle (settle script,
    at the request's µ$ estimate), usage message under the gateway's own ledger key.
    ``periods``: as loaded by the gateway (loaded here when not given). ``timed_out``: the
    upstream timed out after the request was sent (``gateway.books``): the hold is settled
    at the whole reservation and the row is booked as that estimate, flagged for
    reconciliation (``usage_estimate_correct``)."""
    if periods is None:
        periods = holds.budget_periods_load(
            tenant_id=str(tenant.pk), principal_id=str(principal.pk) if principal else None, at=at
        )
    key = holds.hold_new_id()
    client = ops.redis_client()
    if periods:
        call = holds.reserve_call(
            periods=periods, hold_id=key, amount_micros=hold_micros, ttl_seconds=60
        )
        assert holds.reserve_outcome(budget_reserve(client, call), periods) is None
        settle = holds.settle_call(
            periods=periods,
            hold_id=key,
            tenant_id=str(tenant.pk),
            principal_id=str(principal.pk) if principal else None,
            amount_micros=hold_micros,
            # the gateway's rounded figure (the ledger's is exact), or the estimate
            actual_micros=hold_micros if timed_out else 1,
        )
        assert budget_settle(client, settle) is True
    usage_record(
        tenant=tenant,
        request_id=key,
        client_request_id="client-reused-id",
        provider="vertex",
        model=FLASH_LITE,
        occurred_at=at,
        prompt_tokens=0 if timed_out else prompt_tokens,
        principal_id=str(principal.pk) if principal else None,
        status="upstream_timeout" if timed_out else "ok",
        estimate_nanos=hold_micros * 1000 if timed_out else None,
    )
    return key


def ledger_nanos(period: BudgetPeriod) -> int:
    """Σ ledger + Σ storage of the period's window, from the raw rows (no rollups)."""
    budget = Budget.objects.all_tenants().get(pk=period.budget_id)
    rows = UsageRecord.objects.filter(
        tenant_id=period.tenant_id,
        occurred_at__gte=period.period_start,
        occurred_at__lt=period.period_end,
    )
    if budget.principal_id is not None:
        rows = rows.filter(principal_id=budget.principal_id)
    total = int(rows.aggregate(n=Sum("cost_nanos"))["n"] or 0)
    if budget.principal_id is None:
        storage = StorageAccrual.objects.filter(
            Q(hour__gte=period.period_start) & Q(hour__lt=period.period_end),
            tenant_id=period.tenant_id,
        )
        total += int(storage.aggregate(n=Sum("cost_nanos"))["n"] or 0)
    return total


def live_nanos(period: BudgetPeriod, *, at: datetime) -> int:
    """The Redis counter of the period (loaded first if Redis has it not: a cold cache)."""
    budget = Budget.objects.all_tenants().get(pk=period.budget_id)
    holds.budget_periods_load(
        tenant_id=str(period.tenant_id),
        principal_id=str(budget.principal_id) if budget.principal_id else None,
        at=at,
    )
    return holds.budget_period_live(period_id=period.pk)["spent_nanos"]


def figures(period: BudgetPeriod, *, at: datetime) -> tuple[int, int, int]:
    """(PostgreSQL, Redis, Σ ledger + Σ storage) of one period, in nano-USD."""
    fresh = BudgetPeriod.objects.all_tenants().get(pk=period.pk)
    assert fresh.spent_micros == _round(fresh.spent_nanos)
    return fresh.spent_nanos, live_nanos(fresh, at=at), ledger_nanos(fresh)


def _round(nanos: int) -> int:
    from billing.pricing import nanos_to_micros

    return nanos_to_micros(nanos)


def price_book_restore() -> None:
    """The migrations' seeded price book, put back when a transactional test (a browser
    or live-server test) flushed the tables: a row priced against a missing price books 0."""
    import importlib

    from django.apps import apps

    from billing.models import ModelPrice

    if ModelPrice.objects.filter(note="seeded by migration billing.0002").exists():
        return
    for migration in (
        "0002_seed_price_book",
        "0004_seed_published_tiers_deepseek_default_pool",
        "0005_seed_gemini_3_flash_audio_rates",
    ):
        importlib.import_module(f"billing.migrations.{migration}").seed(apps, None)
    # DeepSeek's off-peak window at its published per-line prices (without this step a
    # flushed database got 0004's "75 % off every rate" back).
    from django.db import connection

    importlib.import_module("billing.migrations.0007_deepseek_off_peak_per_line_prices").forwards(
        apps, SimpleNamespace(connection=connection)
    )


def book_micros(tenant, micros: int, *, at: datetime | None = None, principal=None) -> None:
    """Book exactly ``micros`` µ$ of spend through the ledger (one row, flushed), the one
    way spend reaches a budget; the row is an estimate-priced request of a seeded model."""
    from django.utils import timezone

    from billing.services.usage import usage_message, usage_write_direct

    price_book_restore()  # after a flush the model is unpriced and the row would book 0

    message = usage_message(
        tenant=tenant,
        request_id=holds.hold_new_id(),
        provider="vertex",
        model=FLASH_LITE,
        occurred_at=at or timezone.now(),
        prompt_tokens=0,
        principal_id=str(principal.pk) if principal else None,
        estimate_nanos=micros * 1000,
    )
    result = usage_write_direct([message])  # the flush's own path, without the shared queue
    assert (result.inserted, result.unpriced) == (1, 0), result
