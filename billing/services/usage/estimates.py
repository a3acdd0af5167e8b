"""Reconciling estimated ledger rows: a timed-out request booked at its reservation.

When the gateway times out after sending, the provider may still have done (and billed)
the work; the gateway books the request's reservation as its cost, flagged
``estimated``. :func:`usage_estimate_correct` replaces that estimate with the counts the
provider reports (its usage API, a late response, the worker's log): the row is priced
as any row at its ``occurred_at``, the rollups and every budget period move by the exact
difference through the one booking path, and the flag is cleared. Reprice leaves
estimated rows alone (their counts are unknown).
"""

from __future__ import annotations

from django.db import transaction

from billing.errors import InvalidUsage
from billing.models import Provider, UsageRecord
from billing.pricing import UsageCounts, gpu_cost, nanos_to_micros, token_cost
from billing.selectors.prices import PriceIndex
from billing.services.ledger_booking import Booking, ledger_book, ledger_lock
from tenants.models import Tenant


def usage_estimate_correct(
    *,
    tenant: Tenant,
    ledger_key: str,
    prompt_tokens: int,
    output_tokens: int,
    cached_read_tokens: int = 0,
) -> UsageRecord:
    """Replace an estimated row's cost with the reported counts; returns the row.

    Idempotent: a row no longer estimated is returned unchanged. Raises InvalidUsage for
    an unknown key or impossible counts.
    """
    counts = UsageCounts(
        prompt_tokens=prompt_tokens,
        cached_read_tokens=cached_read_tokens,
        output_tokens=output_tokens,
    )
    if counts.problems():
        raise InvalidUsage("; ".join(counts.problems()))
    from billing.services.reprice import rollup_delta_apply

    with transaction.atomic():
        ledger_lock()
        row = (
            UsageRecord.objects.select_for_update()
            .filter(tenant=tenant, request_id=ledger_key)
            .first()
        )
        if row is None:
            raise InvalidUsage(f"No ledger row {ledger_key!r}.", details={"ledger_key": ledger_key})
        if not row.estimated:
            return row
        index = PriceIndex(
            models={(row.provider, row.model)} if row.provider != Provider.VLLM else set(),
            pools={row.pool} if row.provider == Provider.VLLM else set(),
        )
        if row.provider == Provider.VLLM:
            pool_price = index.pool_price(row.pool, row.occurred_at)
            cost = gpu_cost(counts, index.pool_rates(pool_price)) if pool_price else None
        else:
            price = index.model_price(row.provider, row.model, row.occurred_at)
            cost = token_cost(counts, index.rates(price), row.occurred_at) if price else None
        nanos = cost.nanos if cost else 0
        without = cost.without_cache_nanos if cost else 0
        delta, delta_without = nanos - row.cost_nanos, without - row.cost_without_cache_nanos
        UsageRecord.objects.filter(pk=row.pk, tenant=tenant).update(
            prompt_tokens=prompt_tokens,
            cached_read_tokens=cached_read_tokens,
            output_tokens=output_tokens,
            cost_nanos=nanos,
            cost_without_cache_nanos=without,
            cost_micros=nanos_to_micros(nanos),
            cost_without_cache_micros=nanos_to_micros(without),
            estimated=False,
        )
        rollup_delta_apply(
            tenant_id=str(tenant.pk),
            at=row.occurred_at,
            provider=row.provider,
            model=row.model,
            nanos=delta,
            without_nanos=delta_without,
        )
        ledger_book(
            entries=[
                Booking(
                    tenant_id=str(tenant.pk),
                    at=row.occurred_at,
                    nanos=delta,
                    principal_id=str(row.principal_id) if row.principal_id else None,
                )
            ]
        )
    row.refresh_from_db()
    return row
