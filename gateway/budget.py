"""The budget step: hold an upper bound of the request's cost in Redis, settle it after.

Which budget periods apply to a caller is loaded from PostgreSQL at most every
``REFRESH_SECONDS`` per (tenant, principal) and process; everything else is one Lua
script on Redis (``billing.services.budget_reservations``), atomic across every gateway
process: concurrent requests can never hold more than a hard limit leaves. Settled
amounts reach ``BudgetPeriod`` rows in batches (``gateway.tasks``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from prometheus_client import Counter

from billing.services import budget_reservations as holds
from controlplane.db import db_sync_to_async
from controlplane.redis.budget import BudgetReserve, BudgetReserveReply, BudgetSettle
from gateway.directory import REFRESH_SECONDS
from gateway.errors import GatewayError
from gateway.identity import Identity
from gateway.singleflight import SingleFlightCache

logger = logging.getLogger(__name__)
OVERSHOOTS = Counter(
    "cacheplane_gateway_budget_overshoots",
    "Settlements above the request's hold (the upstream billed more than was reserved).",
)
OVERSHOOT_MICROS = Counter(
    "cacheplane_gateway_budget_overshoot_micros",
    "µ$ booked above the holds (booked in full: the provider billed it).",
)
# Event-loop only (no lock needed): (tenant, principal) → the periods that apply.
_periods: SingleFlightCache[tuple[str, str], list[holds.PeriodView]] = SingleFlightCache(
    maxsize=50_000, ttl=REFRESH_SECONDS
)


@dataclass
class Hold:
    """Money held for one request on every period that applies."""

    hold_id: str
    periods: list[holds.PeriodView]
    amount_micros: int
    tenant_id: str
    principal_id: str
    settled: bool = False
    overshoot_micros: int = 0  # settled above the hold (see settle_part)


async def periods_for(identity: Identity, *, fresh: bool = False) -> list[holds.PeriodView]:
    key = (identity.tenant_id, identity.principal_id)
    return await _periods.get(
        key,
        lambda: db_sync_to_async(holds.budget_periods_load)(
            tenant_id=identity.tenant_id, principal_id=identity.principal_id
        ),
        fresh=fresh,
    )


def forget() -> None:
    _periods.clear()


def hold_ttl_seconds() -> float:
    """How long a hold outlives a gateway that died holding it."""
    return settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS + 30.0


async def plan(
    identity: Identity,
    *,
    amount_micros: int | None,
    request_id: str,
    hold_id: str = "",
    unbounded: bool = False,
) -> Hold | None:
    """The hold this request needs (None: no budget applies, nothing to hold), or 402.

    No price under a hard budget: ``price_not_found`` (fail closed: reserving 0 would
    let the request through unbounded). An output with no bound (``unbounded``: no
    ``max_tokens`` and no known model maximum) under a hard budget: ``cost_unbounded``.
    No price under soft budgets only: a hold of 0 (the ledger prices the usage when a
    price appears). ``gateway.limits.admit`` takes the hold, atomically with the rate
    limits. ``hold_id``: the request's ledger key (the ledger's booking of the request
    drops the hold by it); minted when not given.
    """
    periods = await periods_for(identity)
    if not periods:
        return None
    if unbounded and any(p.hard for p in periods):
        details = {"reason": "cost_unbounded", "request_id": request_id}
        await _audit_refusal(identity, periods[0], details)
        raise GatewayError(
            402,
            "cost_unbounded",
            "This request sets no max_tokens and the model's maximum output is not known, "
            "so its cost has no upper bound and your tenant has a hard budget. Set "
            "max_tokens (or max_completion_tokens).",
            param="max_tokens",
        )
    if amount_micros is None:
        if any(p.hard for p in periods):
            details = {"reason": "price_not_found", "request_id": request_id}
            await _audit_refusal(identity, periods[0], details)
            raise GatewayError(
                402,
                "price_not_found",
                "This model has no price here and your tenant has a hard budget: the request "
                "is refused rather than run unbounded. Ask an operator to add a price.",
            )
        amount_micros = 0
    return Hold(
        hold_id=hold_id or holds.hold_new_id(),
        periods=periods,
        amount_micros=amount_micros,
        tenant_id=identity.tenant_id,
        principal_id=identity.principal_id,
    )


def reserve_call(hold: Hold) -> BudgetReserve:
    """Billing's reserve script's call for ``hold`` (its expiry from now)."""
    return holds.reserve_call(
        periods=hold.periods,
        hold_id=hold.hold_id,
        amount_micros=hold.amount_micros,
        ttl_seconds=hold_ttl_seconds(),
    )


async def reserve_outcome(
    identity: Identity, hold: Hold, reply: BudgetReserveReply, request_id: str
) -> bool:
    """True: held. False: a period is not loaded in Redis (reload it, then retry).
    Raises ``402 budget_exceeded`` (audited) when a hard limit refuses."""
    outcome = holds.reserve_outcome(reply, hold.periods)
    if outcome is None:
        return True
    if outcome is False:
        return False
    details = {
        "budget": outcome.period.budget_id,
        "limit_micros": outcome.limit_micros,
        "spent_micros": outcome.spent_micros,
        "reserved_micros": outcome.reserved_micros,
        "estimate_micros": hold.amount_micros,
        "request_id": request_id,
    }
    await _audit_refusal(identity, outcome.period, details)
    details.pop("request_id")
    raise GatewayError(
        402,
        "budget_exceeded",
        "The request would exceed the budget's hard limit.",
        details=details,
    )


def settle_call(hold: Hold | None, *, actual_micros: int) -> BudgetSettle | None:
    """Billing's settle script's call: drop the hold, book ``actual_micros`` (0: a
    release). None when there is nothing to settle; marks the hold settled."""
    if hold is None or hold.settled:
        return None
    hold.settled = True
    overshoot = actual_micros - hold.amount_micros
    if overshoot > 0:
        # Booked in full (the provider billed it), so the next admission sees the period
        # over its limit and refuses; recorded so an operator sees which upstream ignores
        # max_tokens. A hard limit is exceeded by at most one request's overshoot per
        # request in flight.
        hold.overshoot_micros = overshoot
        OVERSHOOTS.inc()
        OVERSHOOT_MICROS.inc(overshoot)
        logger.warning(
            "budget settlement above its hold",
            extra={
                "hold": hold.hold_id,
                "tenant": hold.tenant_id,
                "held_micros": hold.amount_micros,
                "actual_micros": actual_micros,
                "overshoot_micros": overshoot,
            },
        )
    return holds.settle_call(
        periods=hold.periods,
        hold_id=hold.hold_id,
        tenant_id=hold.tenant_id,
        principal_id=hold.principal_id or None,
        amount_micros=hold.amount_micros,
        actual_micros=max(0, actual_micros),
    )


def _audit(identity: Identity, period: holds.PeriodView, details: dict[str, Any]) -> None:
    from audit.services.denials import audit_denial
    from tenants.actor import Actor, AuthMethod

    authenticated = identity.authenticated
    audit_denial(
        actor=Actor(
            principal=authenticated.principal,
            auth_method=AuthMethod.API_KEY,
            key_id=identity.key_id,
            source_ip=identity.source_ip,
            user_agent=identity.user_agent,
        ),
        action="billing.budget.exceeded",
        tenant=authenticated.tenant,
        target_type="budget",
        target_id=period.budget_id,
        details=details,
    )


async def _audit_refusal(
    identity: Identity, period: holds.PeriodView, details: dict[str, Any]
) -> None:
    try:
        await db_sync_to_async(_audit)(identity, period, details)
    except Exception:
        logger.exception("budget refusal not audited", extra={"budget": period.budget_id})
