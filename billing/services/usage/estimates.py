"""Reconciling estimated ledger rows: requests booked at their reservation.

The gateway books a request's reservation as its cost, flagged ``estimated``, when the
counts it has do not price it: it timed out after sending (the provider may still have
done, and billed, the work), or a stream was cut before the usage of a provider that bills
output it does not stream (a reasoning model's hidden reasoning, spoken output).
:func:`usage_estimate_correct` replaces that estimate with the counts the provider
reports (its usage API or dashboard, a late response, the worker's log): the row is
priced as any row at its ``occurred_at``, the rollups and every budget period move by the
exact difference through the one booking path, and the flag is cleared. Reprice leaves
estimated rows alone (their counts are unknown). Callers: the REST route
``POST /api/v1/tenants/{tenant}/usage/{ledger_key}/correction`` (``billing.api``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction
from django.db.models import F

from audit.services import audit_record
from audit.snapshot import diff, model_snapshot
from billing.errors import InvalidUsage, UsageNotEstimated, UsageRecordNotFound
from billing.models import Granularity, Provider, UsageRecord, UsageRollup
from billing.pricing import COUNT_FIELDS, UsageCounts, gpu_cost, nanos_to_micros, token_cost
from billing.selectors.prices import PriceIndex
from billing.services.ledger_booking import Booking, ledger_book, ledger_lock
from tenants.actor import Actor
from tenants.models import Tenant

#: The ledger's count columns are PostgreSQL integers.
MAX_COUNT = 2**31 - 1
KEY_MAX_CHARS = 128  # UsageRecord.request_id
#: The rollups' token columns (a rollup has no cached-audio column).
_ROLLUP_COUNTS = tuple(name for name in COUNT_FIELDS if name != "audio_cached_read_tokens")


def usage_estimate_correct(
    *,
    tenant: Tenant,
    ledger_key: str,
    prompt_tokens: int,
    output_tokens: int,
    cached_read_tokens: int = 0,
    cache_write_5m_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
    thinking_tokens: int = 0,
    audio_prompt_tokens: int = 0,
    audio_cached_read_tokens: int = 0,
    audio_output_tokens: int = 0,
    actor: Actor | None = None,
) -> UsageRecord:
    """Replace an estimated row's cost and counts with the reported counts; returns the row.

    One transaction: the ledger lock, the row, the rollups, the budget periods (and the
    gateway's Redis counters after commit) by the exact difference, and the audit event
    ``billing.usage.correct`` with the row's before/after. ``actor``: who reports the
    counts (None: Cacheplane itself). Idempotent: a row already holding these counts is
    returned unchanged, nothing audited. Raises InvalidUsage (impossible counts),
    UsageRecordNotFound (no such key in the tenant), UsageNotEstimated (the row holds
    other counts and is not an estimate).
    """
    counts = UsageCounts(
        prompt_tokens=prompt_tokens,
        cached_read_tokens=cached_read_tokens,
        cache_write_5m_tokens=cache_write_5m_tokens,
        cache_write_1h_tokens=cache_write_1h_tokens,
        output_tokens=output_tokens,
        thinking_tokens=thinking_tokens,
        audio_prompt_tokens=audio_prompt_tokens,
        audio_cached_read_tokens=audio_cached_read_tokens,
        audio_output_tokens=audio_output_tokens,
    )
    problems = counts.problems()
    if not problems and max(getattr(counts, name) for name in COUNT_FIELDS) > MAX_COUNT:
        problems = [f"a count must be at most {MAX_COUNT}"]
    if problems:
        raise InvalidUsage("; ".join(problems), details={"ledger_key": ledger_key})
    from billing.services.reprice import rollup_delta_apply

    # A key that no row can hold never reaches SQL (a URL path may carry any character).
    if not 0 < len(ledger_key) <= KEY_MAX_CHARS or "\x00" in ledger_key:
        raise UsageRecordNotFound("No ledger row with this key.", details={"ledger_key": ""})
    with transaction.atomic():
        ledger_lock()
        row = (
            UsageRecord.objects.select_for_update()
            .filter(tenant=tenant, request_id=ledger_key)
            .first()
        )
        if row is None:
            raise UsageRecordNotFound(
                "No ledger row with this key.", details={"ledger_key": ledger_key}
            )
        if not row.estimated:
            if all(getattr(row, name) == getattr(counts, name) for name in COUNT_FIELDS):
                return row  # the same correction again
            raise UsageNotEstimated(
                "This ledger row is not an estimate; its counts stand.",
                details={"ledger_key": ledger_key},
            )
        before = model_snapshot(row)
        index = PriceIndex(
            models={(row.provider, row.model)} if row.provider != Provider.VLLM else set(),
            pools={row.pool} if row.provider == Provider.VLLM else set(),
        )
        price_version_id, pool_price_id = row.price_version_id, row.pool_price_id
        if row.provider == Provider.VLLM:
            pool_price = index.pool_price(row.pool, row.occurred_at)
            cost = gpu_cost(counts, index.pool_rates(pool_price)) if pool_price else None
            pool_price_id = pool_price.pk if pool_price else pool_price_id
        else:
            price = index.model_price(row.provider, row.model, row.occurred_at)
            cost = token_cost(counts, index.rates(price), row.occurred_at) if price else None
            price_version_id = price.pk if price else price_version_id
        nanos = cost.nanos if cost else 0
        without = cost.without_cache_nanos if cost else 0
        delta, delta_without = nanos - row.cost_nanos, without - row.cost_without_cache_nanos
        UsageRecord.objects.filter(pk=row.pk, tenant=tenant).update(
            **{name: getattr(counts, name) for name in COUNT_FIELDS},
            price_version_id=price_version_id,
            pool_price_id=pool_price_id,
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
        _rollup_counts_move(row, counts)
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
        # Last, as the lock order wants: the audit chain head is held until commit.
        audit_record(
            actor=actor or Actor.system("usage_estimate_correct"),
            action="billing.usage.correct",
            tenant=tenant,
            target_type="usage_record",
            target_id=ledger_key,
            changes=diff(before, model_snapshot(row)),
            details={"delta_nanos": delta},
        )
    return row


def _rollup_counts_move(row: UsageRecord, counts: UsageCounts) -> None:
    """The row's minute and day rollups take the new counts in place of the estimate's
    (their costs move in ``rollup_delta_apply``). The caller holds the ledger lock, under
    which the flush inserted both rollups with the row."""
    moved = {
        name: F(name) + (getattr(counts, name) - getattr(row, name))
        for name in _ROLLUP_COUNTS
        if getattr(counts, name) != getattr(row, name)
    }
    if not moved:
        return
    at = row.occurred_at.astimezone(UTC)
    buckets = {
        Granularity.MINUTE: at.replace(second=0, microsecond=0),
        Granularity.DAY: datetime(at.year, at.month, at.day, tzinfo=UTC),
    }
    for granularity, bucket in buckets.items():
        UsageRollup.objects.filter(
            tenant_id=row.tenant_id,
            granularity=granularity,
            bucket=bucket,
            provider=row.provider,
            model=row.model,
        ).update(**moved)
