"""Budget holds around a request: reserve an upper bound before forwarding, settle after.

Whether a tenant has any budget at all is cached for ``REFRESH_SECONDS``, so tenants
without budgets cost no database round trip per request; tenants with budgets pay one
conditional UPDATE to reserve and one to settle (the race-free path in billing).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from asgiref.sync import sync_to_async

from gateway.directory import REFRESH_SECONDS
from gateway.errors import GatewayError
from gateway.metering import Meter

logger = logging.getLogger(__name__)
_has_budget: dict[str, tuple[float, bool]] = {}


def _tenant_has_budget(tenant_id: str) -> bool:
    from billing.models import Budget

    return Budget.objects.filter(tenant_id=tenant_id, archived_at__isnull=True).exists()


async def has_budget(tenant_id: str) -> bool:
    entry = _has_budget.get(tenant_id)
    if entry is not None and time.monotonic() - entry[0] < REFRESH_SECONDS:
        return entry[1]
    value = await sync_to_async(_tenant_has_budget, thread_sensitive=False)(tenant_id)
    _has_budget[tenant_id] = (time.monotonic(), value)
    return value


def _reserve(meter: Meter, prompt_tokens: int, max_tokens: int, authenticated):
    from billing.errors import BudgetExceeded, PriceNotFound
    from billing.selectors.usage import usage_estimate_micros
    from billing.services.budgets import budget_reserve

    try:
        estimate = usage_estimate_micros(
            provider=meter.provider,
            model=meter.model,
            prompt_tokens=prompt_tokens,
            max_output_tokens=max_tokens,
            at=datetime.now(tz=UTC),
            pool=meter.pool,
        )
    except PriceNotFound:
        logger.warning("no price: reserving nothing", extra={"model": meter.model})
        estimate = 0
    try:
        return budget_reserve(
            tenant=authenticated.tenant,
            principal=authenticated.principal,
            estimate_micros=estimate,
            request_id=meter.request_id,
        )
    except BudgetExceeded as exc:
        raise GatewayError(402, "budget_exceeded", exc.message, details=exc.details) from None


async def reserve(meter: Meter, *, prompt_tokens: int, max_tokens: int, authenticated):
    """A reservation (or None when the tenant has no budget); 402 when over the limit."""
    if not await has_budget(meter.tenant_id):
        return None
    return await sync_to_async(_reserve, thread_sensitive=False)(
        meter, prompt_tokens, max_tokens, authenticated
    )


def _settle(reservation, meter: Meter) -> None:
    from billing.errors import PriceNotFound
    from billing.pricing import UsageCounts
    from billing.selectors.usage import usage_cost_quote
    from billing.services.budgets import budget_release, budget_settle

    if meter.prompt_tokens == 0 and meter.output_tokens == 0:
        budget_release(reservation=reservation)
        return
    try:
        actual = usage_cost_quote(
            provider=meter.provider,
            model=meter.model,
            pool=meter.pool,
            at=datetime.now(tz=UTC),
            counts=UsageCounts(
                prompt_tokens=meter.prompt_tokens,
                cached_read_tokens=meter.cached_tokens,
                output_tokens=meter.output_tokens,
            ),
        ).micros
    except PriceNotFound:
        actual = 0
    budget_settle(reservation=reservation, actual_micros=actual)


async def settle(reservation, meter: Meter) -> None:
    """Charge what was used, or release the hold when nothing was (always called)."""
    if reservation is None:
        return
    try:
        await sync_to_async(_settle, thread_sensitive=False)(reservation, meter)
    except Exception:
        logger.exception("budget settle failed", extra={"request_id": meter.request_id})
