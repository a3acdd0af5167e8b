"""Recompute booked costs after a price correction: ledger rows, rollups, storage.

Each ledger row is priced again with the live price version effective at its
``occurred_at``; changed rows are updated and the difference is applied to the minute
and day rollups as increments (under the rollup advisory lock, so a concurrent flush
cannot interleave). Storage accruals are recomputed the same way.

One transaction per batch, not one for the whole run (a reprice may touch millions of
rows); rerunning is harmless because repricing a correctly priced row changes nothing.
Rollup deltas are exact (nano-USD) and each touched rollup's µ$ figure is recomputed
from its new nano total. Finally the spend counters of every budget period overlapping
the range are recomputed from the ledger and storage (after draining the usage queue),
so budgets, rollups, savings and the ledger agree again; the gateway's Redis counters
(``billing.services.budget_reservations``) move by the same deltas.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from audit.services import audit_record
from billing.models import BudgetPeriod, Provider, StorageAccrual, UsageKind, UsageRecord
from billing.pricing import (
    UsageCounts,
    cache_creation_cost,
    gpu_cost,
    nanos_to_micros,
    storage_nanos,
    token_cost,
)
from billing.selectors.prices import PriceIndex
from billing.selectors.usage import tenant_spend_nanos
from billing.services.budget_locks import budget_periods_lock
from billing.services.budget_reservations import (
    budget_periods_live_adjust_on_commit,
    budget_settlements_flush,
)
from billing.services.ledger_booking import ledger_lock
from billing.services.storage import _seconds, hour_floor
from billing.services.usage import ROLLUP_LOCK, micros_sql, usage_flush
from tenants.actor import Actor
from tenants.models import Tenant

_UPDATE_SQL = (
    """
UPDATE billing_usagerecord AS u SET
  price_version_id = v.price_version_id, pool_price_id = v.pool_price_id,
  cost_nanos = v.cost_nanos, cost_without_cache_nanos = v.cost_without_cache_nanos,
  cost_micros = """
    + micros_sql("v.cost_nanos")
    + ", cost_without_cache_micros = "
    + micros_sql("v.cost_without_cache_nanos")
    + """,
  repriced_at = now()
FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])
  AS v(id, price_version_id, pool_price_id, cost_nanos, cost_without_cache_nanos)
WHERE u.id = v.id
"""
)

# Deltas (exact nanos, may be negative) and unpriced-count deltas; the µ$ columns are
# recomputed from the resulting nano totals (a bucket the delta creates: from its own sum,
# never left at 0).
_ROLLUP_DELTA_SQL = (
    """
INSERT INTO billing_usagerollup (tenant_id, granularity, bucket, provider, model, requests,
  error_requests, unpriced_requests, prompt_tokens, cached_read_tokens, cache_write_5m_tokens,
  cache_write_1h_tokens, output_tokens, thinking_tokens, audio_prompt_tokens,
  audio_output_tokens, cost_nanos, cost_without_cache_nanos, cost_micros,
  cost_without_cache_micros)
SELECT t, g, date_trunc(g, at, 'UTC'), p, m, 0, 0, sum(un), 0, 0, 0, 0, 0, 0, 0, 0, sum(c),
  sum(w), """
    + micros_sql("sum(c)")
    + ", "
    + micros_sql("sum(w)")
    + """
FROM unnest(%s::uuid[], %s::timestamptz[], %s::text[], %s::text[], %s::bigint[], %s::bigint[],
  %s::bigint[]) AS d(t, at, p, m, c, w, un)
  CROSS JOIN (VALUES ('minute'), ('day')) AS gr(g)
GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
ON CONFLICT (tenant_id, granularity, bucket, provider, model) DO UPDATE SET
  unpriced_requests = billing_usagerollup.unpriced_requests + EXCLUDED.unpriced_requests,
  cost_nanos = billing_usagerollup.cost_nanos + EXCLUDED.cost_nanos,
  cost_without_cache_nanos =
    billing_usagerollup.cost_without_cache_nanos + EXCLUDED.cost_without_cache_nanos,
  cost_micros = """
    + micros_sql("billing_usagerollup.cost_nanos + EXCLUDED.cost_nanos")
    + ", cost_without_cache_micros = "
    + micros_sql("billing_usagerollup.cost_without_cache_nanos + EXCLUDED.cost_without_cache_nanos")
    + """
"""
)


def rollup_delta_apply(
    *, tenant_id: str, at: datetime, provider: str, model: str, nanos: int, without_nanos: int
) -> None:
    """Move one (tenant, minute/day, model) rollup by exact nano deltas (its µ$ column is
    recomputed from the new nano total). The caller holds the ledger lock."""
    if not nanos and not without_nanos:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            _ROLLUP_DELTA_SQL,
            [[tenant_id], [at], [provider], [model], [nanos], [without_nanos], [0]],
        )


@dataclass
class RepriceResult:
    rows_scanned: int = 0
    rows_changed: int = 0
    delta_nanos: int = 0
    storage_rows_scanned: int = 0
    storage_rows_changed: int = 0
    storage_delta_nanos: int = 0
    budget_periods_recomputed: int = 0
    budget_delta_nanos: int = 0

    @property
    def delta_micros(self) -> int:
        return nanos_to_micros(self.delta_nanos)

    @property
    def storage_delta_micros(self) -> int:
        return nanos_to_micros(self.storage_delta_nanos)


def _reprice_usage_batch(rows: list[UsageRecord], result: RepriceResult) -> None:
    index = PriceIndex(
        models={(r.provider, r.model) for r in rows if r.provider != Provider.VLLM},
        pools={r.pool for r in rows if r.provider == Provider.VLLM},
    )
    changed: list[tuple[Any, ...]] = []
    deltas: defaultdict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        counts = UsageCounts(
            r.prompt_tokens,
            r.cached_read_tokens,
            r.cache_write_5m_tokens,
            r.cache_write_1h_tokens,
            r.output_tokens,
            r.thinking_tokens,
            r.audio_prompt_tokens,
            r.audio_cached_read_tokens,
            r.audio_output_tokens,
        )
        price_id = pool_price_id = None
        cost = without = 0
        if r.provider == Provider.VLLM:
            pool_price = index.pool_price(r.pool, r.occurred_at)
            if pool_price is not None:
                booked = gpu_cost(counts, index.pool_rates(pool_price))
                pool_price_id, cost, without = (
                    pool_price.pk,
                    booked.nanos,
                    booked.without_cache_nanos,
                )
        else:
            price = index.model_price(r.provider, r.model, r.occurred_at)
            if price is not None:
                if r.kind == UsageKind.CACHE_CREATE:
                    ttl = 300 if r.cache_write_5m_tokens else 3600
                    booked = cache_creation_cost(
                        tokens=r.prompt_tokens, rates=index.rates(price), ttl_seconds=ttl
                    )
                else:
                    booked = token_cost(counts, index.rates(price), r.occurred_at)
                price_id, cost, without = price.pk, booked.nanos, booked.without_cache_nanos
        if (price_id, pool_price_id, cost, without) == (
            r.price_version_id,
            r.pool_price_id,
            r.cost_nanos,
            r.cost_without_cache_nanos,
        ):
            continue
        was_unpriced = r.price_version_id is None and r.pool_price_id is None
        is_unpriced = price_id is None and pool_price_id is None
        changed.append((r.pk, price_id, pool_price_id, cost, without))
        key = (str(r.tenant_id), r.occurred_at, r.provider, r.model)
        deltas[key][0] += cost - r.cost_nanos
        deltas[key][1] += without - r.cost_without_cache_nanos
        deltas[key][2] += int(is_unpriced) - int(was_unpriced)
        result.delta_nanos += cost - r.cost_nanos
    result.rows_scanned += len(rows)
    result.rows_changed += len(changed)
    if not changed:
        return
    with connection.connection.cursor() as cursor:
        cursor.execute(_UPDATE_SQL, [list(col) for col in zip(*changed, strict=True)])
        keys = list(deltas)
        cursor.execute(
            _ROLLUP_DELTA_SQL,
            [
                [k[0] for k in keys],
                [k[1] for k in keys],
                [k[2] for k in keys],
                [k[3] for k in keys],
                [deltas[k][0] for k in keys],
                [deltas[k][1] for k in keys],
                [deltas[k][2] for k in keys],
            ],
        )


def _reprice_storage(
    *, since: datetime, until: datetime | None, tenant: Tenant | None, result: RepriceResult
) -> None:
    # all_tenants: repricing walks every tenant's ledger since a date
    qs = StorageAccrual.objects.all_tenants().filter(hour__gte=hour_floor(since))
    if until is not None:
        qs = qs.filter(hour__lt=until)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    last_id = 0
    while True:
        with transaction.atomic():
            batch = list(qs.filter(id__gt=last_id).order_by("id").select_for_update()[:2000])
            if not batch:
                return
            last_id = batch[-1].pk
            index = PriceIndex(
                models={(a.provider, a.model) for a in batch if a.provider != Provider.VLLM},
                pools={a.pool for a in batch if a.provider == Provider.VLLM},
            )
            for a in batch:
                result.storage_rows_scanned += 1
                seconds = _seconds(a.covered_from, a.covered_to)
                price_id = pool_price_id = None
                nanos = 0
                if a.provider == Provider.VLLM:
                    pool_price = index.pool_price(a.pool, a.covered_from)
                    if pool_price is not None:
                        pool_price_id = pool_price.pk
                        nanos = index.pool_rates(pool_price).kv_nanos(
                            tokens=a.tokens, seconds=seconds
                        )
                else:
                    price = index.model_price(a.provider, a.model, a.covered_from)
                    if price is not None:
                        price_id = price.pk
                        nanos = storage_nanos(
                            tokens=a.tokens,
                            seconds=seconds,
                            rate_per_mtok_hour=index.rates(price)
                            .for_prompt(a.tokens)
                            .storage_per_hour,
                        )
                if (price_id, pool_price_id, nanos) == (
                    a.price_version_id,
                    a.pool_price_id,
                    a.cost_nanos,
                ):
                    continue
                result.storage_rows_changed += 1
                result.storage_delta_nanos += nanos - a.cost_nanos
                # all_tenants: repricing walks every tenant's ledger since a date
                StorageAccrual.objects.all_tenants().filter(pk=a.pk).update(
                    price_version_id=price_id,
                    pool_price_id=pool_price_id,
                    cost_nanos=nanos,
                    cost_micros=nanos_to_micros(nanos),
                )


def budget_period_recompute(*, period: BudgetPeriod) -> int:
    """Set one period's spend to what the ledger and storage hold for it; returns the
    delta in nanos.

    Locked row, one statement: reservations (``reserved_micros``) are left alone. The
    figure is the exact nano sum (request costs of the period, of the budget's service
    account when it has one, plus storage for tenant-wide budgets). Holds never add
    spend (``billing.services.ledger_booking``), so a cache's storage recomputed here is
    not settled again when the cache ends. Under the ledger lock: no booking lands
    between the sum and the write.
    """
    with transaction.atomic():
        ledger_lock()
        # Lock order (billing.services.budget_locks): the budget (KEY SHARE), then the
        # period (NO KEY UPDATE); a joined FOR UPDATE of both would block every alert's
        # foreign-key check and budget edit at once.
        budget_periods_lock(period_ids=[period.pk])
        # all_tenants: repricing walks every tenant's budget periods since a date
        locked = BudgetPeriod.objects.all_tenants().select_related("budget").get(pk=period.pk)
        spent = tenant_spend_nanos(
            tenant_id=locked.tenant_id,
            since=locked.period_start,
            until=locked.period_end,
            principal_id=locked.budget.principal_id,
        )
        delta = spent - locked.spent_nanos
        if delta or locked.spent_micros != nanos_to_micros(spent):
            BudgetPeriod.objects.filter(pk=locked.pk, tenant_id=locked.tenant_id).update(
                spent_nanos=spent, spent_micros=nanos_to_micros(spent)
            )
            # The gateway's Redis counter moves by the same delta (after commit), so the
            # hot path enforces the recomputed figure, not the old one.
            budget_periods_live_adjust_on_commit(deltas={locked.pk: delta})
    return delta


def _budget_periods_recompute(
    *, since: datetime, until: datetime | None, tenant: Tenant | None, result: RepriceResult
) -> None:
    # Drain both queues first: a settlement the gateway made but PostgreSQL has not
    # booked yet would be counted twice (in the ledger now, by its flush later), and a
    # request settled on its budget but not yet in the ledger would drop out. Requests
    # settling while the recomputation runs can still land on either side of it: run
    # it when the tenant is quiet for figures exact to the µ$.
    budget_settlements_flush()
    usage_flush()
    # all_tenants: repricing walks every tenant's budget periods since a date
    periods = BudgetPeriod.objects.all_tenants().filter(period_end__gt=since)
    if until is not None:
        periods = periods.filter(period_start__lt=until)
    if tenant is not None:
        periods = periods.filter(tenant=tenant)
    for period in periods.order_by("id"):
        result.budget_periods_recomputed += 1
        result.budget_delta_nanos += budget_period_recompute(period=period)


def usage_reprice(
    *,
    actor: Actor,
    since: datetime,
    until: datetime | None = None,
    tenant: Tenant | None = None,
    batch_size: int = 5000,
) -> RepriceResult:
    """Reprice ledger rows and storage accruals from ``since`` (optionally one tenant).

    Audited as ``billing.usage.reprice`` (on the tenant's chain, or the platform chain
    for every tenant) with the counts and the total difference.
    """
    result = RepriceResult()
    # all_tenants: repricing walks every tenant's ledger since a date
    # Estimated rows keep their estimate (their counts are unknown) until reconciliation
    # corrects them (billing.services.usage.estimates).
    qs = UsageRecord.objects.all_tenants().filter(occurred_at__gte=since, estimated=False)
    if until is not None:
        qs = qs.filter(occurred_at__lt=until)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    last_id = 0
    while True:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROLLUP_LOCK])
            batch = list(qs.filter(id__gt=last_id).order_by("id").select_for_update()[:batch_size])
            if not batch:
                break
            last_id = batch[-1].pk
            connection.ensure_connection()
            _reprice_usage_batch(batch, result)
    _reprice_storage(since=since, until=until, tenant=tenant, result=result)
    _budget_periods_recompute(since=since, until=until, tenant=tenant, result=result)
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="billing.usage.reprice",
            tenant=tenant,
            target_type="usage",
            target_id=tenant.slug if tenant else "all-tenants",
            details={
                "since": since.isoformat(),
                "until": until.isoformat() if until else None,
                "finished_at": timezone.now().isoformat(),
                **asdict(result),
                "delta_micros": result.delta_micros,
                "storage_delta_micros": result.storage_delta_micros,
            },
        )
    return result
