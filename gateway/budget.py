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

from asgiref.sync import sync_to_async
from django.conf import settings

from billing.services import budget_reservations as holds
from gateway import hotpath_redis
from gateway.directory import REFRESH_SECONDS
from gateway.errors import GatewayError
from gateway.identity import Identity
from gateway.singleflight import SingleFlightCache

logger = logging.getLogger(__name__)
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


async def periods_for(identity: Identity, *, fresh: bool = False) -> list[holds.PeriodView]:
    key = (identity.tenant_id, identity.principal_id)
    return await _periods.get(
        key,
        lambda: sync_to_async(holds.budget_periods_load, thread_sensitive=False)(
            tenant_id=identity.tenant_id, principal_id=identity.principal_id
        ),
        fresh=fresh,
    )


def forget() -> None:
    _periods.clear()


def hold_ttl_seconds() -> float:
    """How long a hold outlives a gateway that died holding it."""
    return settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS + 30.0


async def reserve(identity: Identity, *, amount_micros: int | None, request_id: str) -> Hold | None:
    """Hold ``amount_micros`` (None: the request has no price) or refuse with 402.

    No budget: None, nothing held. No price under a hard budget: ``price_not_found``
    (fail closed: reserving 0 would let the request through unbounded). No price under
    soft budgets only: a hold of 0 (the ledger prices the usage when a price appears).
    """
    periods = await periods_for(identity)
    if not periods:
        return None
    if amount_micros is None:
        if any(p.hard for p in periods):
            await _audit_refusal(identity, request_id, periods[0], {"reason": "price_not_found"})
            raise GatewayError(
                402,
                "price_not_found",
                "This model has no price here and your tenant has a hard budget: the request "
                "is refused rather than run unbounded. Ask an operator to add a price.",
            )
        amount_micros = 0
    hold = Hold(
        hold_id=holds.hold_new_id(),
        periods=periods,
        amount_micros=amount_micros,
        tenant_id=identity.tenant_id,
        principal_id=identity.principal_id,
    )
    script = hotpath_redis.script(holds.RESERVE_SCRIPT)
    for attempt in range(2):
        keys, args = holds.reserve_args(
            periods=hold.periods,
            hold_id=hold.hold_id,
            amount_micros=amount_micros,
            ttl_seconds=hold_ttl_seconds(),
        )
        outcome = holds.reserve_outcome(await script(keys=keys, args=args), hold.periods)
        if outcome is None:
            return hold
        if outcome is False and attempt == 0:  # Redis lost or expired the hash: reload
            hold.periods = await periods_for(identity, fresh=True)
            continue
        if outcome is False:
            raise GatewayError(503, "budget_unavailable", "Budget counters are unavailable.")
        details = {
            "budget": outcome.period.budget_id,
            "limit_micros": outcome.limit_micros,
            "spent_micros": outcome.spent_micros,
            "reserved_micros": outcome.reserved_micros,
            "estimate_micros": amount_micros,
        }
        await _audit_refusal(identity, request_id, outcome.period, details)
        raise GatewayError(
            402,
            "budget_exceeded",
            "The request would exceed the budget's hard limit.",
            details=details,
        )
    raise AssertionError("unreachable")


async def settle(hold: Hold | None, *, actual_micros: int) -> None:
    """Drop the hold and book ``actual_micros`` (0: a release). Idempotent, never raises."""
    if hold is None or hold.settled:
        return
    hold.settled = True
    keys, args = holds.settle_args(
        periods=hold.periods,
        hold_id=hold.hold_id,
        tenant_id=hold.tenant_id,
        principal_id=hold.principal_id or None,
        amount_micros=hold.amount_micros,
        actual_micros=max(0, actual_micros),
    )
    try:
        await hotpath_redis.script(holds.SETTLE_SCRIPT)(keys=keys, args=args)
    except Exception:
        # The hold expires on its own; the usage ledger still has the request.
        logger.exception("budget settle failed", extra={"hold": hold.hold_id})


def _audit(
    identity: Identity, request_id: str, period: holds.PeriodView, details: dict[str, Any]
) -> None:
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
        details={**details, "request_id": request_id},
    )


async def _audit_refusal(
    identity: Identity, request_id: str, period: holds.PeriodView, details: dict[str, Any]
) -> None:
    try:
        await sync_to_async(_audit, thread_sensitive=False)(identity, request_id, period, details)
    except Exception:
        logger.exception("budget refusal not audited", extra={"request_id": request_id})
