"""Recompute booked costs after a price correction: ledger rows, rollups, storage.

Each ledger row is priced again with the live price version effective at its
``occurred_at``; changed rows are updated and the difference is applied to the minute
and day rollups as increments (under the rollup advisory lock, so a concurrent flush
cannot interleave). Storage accruals are recomputed the same way.

One transaction per batch, not one for the whole run (a reprice may touch millions of
rows); rerunning is harmless because repricing a correctly priced row changes nothing.
Budget counters are not adjusted: they record what was enforced at the time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from audit.services import audit_record
from billing.models import Provider, StorageAccrual, UsageRecord
from billing.pricing import UsageCounts, gpu_cost, storage_micros, token_cost
from billing.selectors.prices import PriceIndex
from billing.services.storage import _seconds, hour_floor
from billing.services.usage import ROLLUP_LOCK
from tenants.actor import Actor
from tenants.models import Tenant

_UPDATE_SQL = """
UPDATE billing_usagerecord AS u SET
  price_version_id = v.price_version_id, pool_price_id = v.pool_price_id,
  cost_micros = v.cost_micros, cost_without_cache_micros = v.cost_without_cache_micros,
  repriced_at = now()
FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])
  AS v(id, price_version_id, pool_price_id, cost_micros, cost_without_cache_micros)
WHERE u.id = v.id
"""

_ROLLUP_DELTA_SQL = """
INSERT INTO billing_usagerollup (tenant_id, granularity, bucket, provider, model, requests,
  error_requests, prompt_tokens, cached_read_tokens, cache_write_5m_tokens,
  cache_write_1h_tokens, output_tokens, cost_micros, cost_without_cache_micros)
SELECT t, g, date_trunc(g, at, 'UTC'), p, m, 0, 0, 0, 0, 0, 0, 0, sum(c), sum(w)
FROM unnest(%s::uuid[], %s::timestamptz[], %s::text[], %s::text[], %s::bigint[], %s::bigint[])
  AS d(t, at, p, m, c, w)
  CROSS JOIN (VALUES ('minute'), ('day')) AS gr(g)
GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
ON CONFLICT (tenant_id, granularity, bucket, provider, model) DO UPDATE SET
  cost_micros = billing_usagerollup.cost_micros + EXCLUDED.cost_micros,
  cost_without_cache_micros =
    billing_usagerollup.cost_without_cache_micros + EXCLUDED.cost_without_cache_micros
"""


@dataclass
class RepriceResult:
    rows_scanned: int = 0
    rows_changed: int = 0
    delta_micros: int = 0
    storage_rows_scanned: int = 0
    storage_rows_changed: int = 0
    storage_delta_micros: int = 0


def _reprice_usage_batch(rows: list[UsageRecord], result: RepriceResult) -> None:
    index = PriceIndex(
        models={(r.provider, r.model) for r in rows if r.provider != Provider.VLLM},
        pools={r.pool for r in rows if r.provider == Provider.VLLM},
    )
    changed: list[tuple] = []
    deltas: defaultdict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        counts = UsageCounts(
            r.prompt_tokens,
            r.cached_read_tokens,
            r.cache_write_5m_tokens,
            r.cache_write_1h_tokens,
            r.output_tokens,
        )
        price_id = pool_price_id = None
        cost = without = 0
        if r.provider == Provider.VLLM:
            pool_price = index.pool_price(r.pool, r.occurred_at) if r.pool else None
            if pool_price is not None:
                booked = gpu_cost(counts, index.pool_rates(pool_price))
                pool_price_id, cost, without = (
                    pool_price.pk,
                    booked.micros,
                    booked.without_cache_micros,
                )
        else:
            price = index.model_price(r.provider, r.model, r.occurred_at)
            if price is not None:
                booked = token_cost(counts, index.rates(price))
                price_id, cost, without = price.pk, booked.micros, booked.without_cache_micros
        if (price_id, pool_price_id, cost, without) == (
            r.price_version_id,
            r.pool_price_id,
            r.cost_micros,
            r.cost_without_cache_micros,
        ):
            continue
        changed.append((r.pk, price_id, pool_price_id, cost, without))
        key = (str(r.tenant_id), r.occurred_at, r.provider, r.model)
        deltas[key][0] += cost - r.cost_micros
        deltas[key][1] += without - r.cost_without_cache_micros
        result.delta_micros += cost - r.cost_micros
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
                micros = 0
                if a.provider == Provider.VLLM:
                    pool_price = index.pool_price(a.pool, a.covered_from)
                    if pool_price is not None:
                        pool_price_id = pool_price.pk
                        micros = index.pool_rates(pool_price).kv_micros(
                            tokens=a.tokens, seconds=seconds
                        )
                else:
                    price = index.model_price(a.provider, a.model, a.covered_from)
                    if price is not None:
                        price_id = price.pk
                        micros = storage_micros(
                            tokens=a.tokens,
                            seconds=seconds,
                            rate_per_mtok_hour=price.storage_per_mtok_hour,
                        )
                if (price_id, pool_price_id, micros) == (
                    a.price_version_id,
                    a.pool_price_id,
                    a.cost_micros,
                ):
                    continue
                result.storage_rows_changed += 1
                result.storage_delta_micros += micros - a.cost_micros
                # all_tenants: repricing walks every tenant's ledger since a date
                StorageAccrual.objects.all_tenants().filter(pk=a.pk).update(
                    price_version_id=price_id, pool_price_id=pool_price_id, cost_micros=micros
                )


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
    qs = UsageRecord.objects.all_tenants().filter(occurred_at__gte=since)
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
            },
        )
    return result
