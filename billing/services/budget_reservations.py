"""Budget holds of gateway requests in Redis, settled to PostgreSQL in batches.

Why Redis: a reservation in PostgreSQL costs two updates of the same ``BudgetPeriod`` row
per request, and every request of a tenant queues on that row's lock. Here a request
costs one Lua script to reserve and one to settle, both atomic in Redis, which is one
server for any number of gateway processes; PostgreSQL sees one statement per period per
batch.

Keys (``P`` = ``CACHEPLANE_BUDGET_REDIS_PREFIX``, ``id`` = the ``BudgetPeriod`` id; the
builders are ``controlplane.redis.keys.budget_*``):

- ``P:{id}`` hash: ``limit``, ``hard`` (``1``/``0``), ``spent_nanos`` (exact nano-USD:
  what PostgreSQL held when the hash was loaded, plus every booking of the ledger since,
  mirrored after its commit by ``billing.services.ledger_booking``: the ledger is the
  only source of spend), ``reserved`` (open holds, and settled requests' costs pending
  their ledger booking), ``pg_reserved`` (holds taken in PostgreSQL: cache storage);
- ``P:{id}:holds`` sorted set of hold ids scored by expiry (ms), ``P:{id}:amounts`` hash
  hold id → amount;
- ``P:settle`` list of settlement messages waiting for the flush, ``P:settle:batch:*`` and
  ``P:settle:claims`` the batches being flushed (re-claimed after a lease: a flush that
  died loses nothing);
- ``P:periods`` set of period ids ever loaded (for the expiry sweep).

Invariant (hard budgets): ``round(spent_nanos / 1000) + reserved + pg_reserved <= limit``
after every reserve, checked and applied in one script over every period that applies
(tenant-wide and service-account budgets together). A settle cuts the hold to the actual
cost (which may exceed it: the work was done and will be booked) and leaves it pending;
the ledger flush books the request's exact cost and drops the hold in one step.

A gateway that dies leaves its holds behind: they carry an expiry (the upstream timeout
plus a margin) and every reserve on the period, and the beat sweep, drop expired holds
first. The settlement flush inserts one ``BudgetReservation`` row per settled hold
(unique per ``(tenant, request_id)``: a replayed batch inserts nothing), a record of the
hold; it charges nothing (spend comes from the ledger only).

The Lua scripts themselves are ``controlplane/redis/lua/budget_*.lua`` (billing's logic, kept
with every other script by the package that owns Redis), run through the typed wrappers
of ``controlplane.redis.budget``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Literal, cast

import redis
from django.db import connection, transaction

from billing.models import BudgetPeriod
from billing.pricing import nanos_to_micros
from billing.services.budget_periods import budget_periods_applicable
from controlplane import ops
from controlplane.redis import keys
from controlplane.redis.budget import (
    BudgetReserve,
    BudgetReserveReply,
    BudgetSettle,
    budget_adjust,
    budget_expire,
)
from controlplane.redis.queues import list_claim

#: How long a settled request's cost stays held while the ledger has not booked it yet.
PENDING_SECONDS = 600

logger = logging.getLogger(__name__)


def period_keys(period_id: int) -> tuple[str, str, str]:
    """(hash, holds, amounts) of one period."""
    return keys.budget_period(period_id)


@dataclass(frozen=True)
class PeriodView:
    """One budget period that applies to a caller, as the hot path needs it."""

    id: int
    budget_id: str
    hard: bool


@dataclass(frozen=True)
class Refusal:
    """Why a hold was refused (the figures of the refusing period)."""

    period: PeriodView
    limit_micros: int
    spent_micros: int
    reserved_micros: int


def budget_periods_load(
    *, tenant_id: str, principal_id: str | None, at: datetime | None = None
) -> list[PeriodView]:
    """The periods that apply to the caller, loaded into Redis (one query per call).

    ``spent_nanos`` is seeded once (``HSETNX``: Redis keeps counting from there); ``limit``,
    ``hard`` and ``pg_reserved`` are refreshed on every load, so a budget change reaches
    the hot path within the caller's refresh interval. The hash lives until a week after
    the period ends.
    """
    from tenants.models import Tenant

    periods = budget_periods_applicable(
        tenant=Tenant(pk=tenant_id), principal_id=principal_id, at=at or datetime.now(tz=UTC)
    )
    if not periods:
        return []
    pipe = ops.redis_client().pipeline(transaction=False)
    now = time.time()
    for period in periods:
        h, z, a = period_keys(period.pk)
        pipe.hsetnx(h, "spent_nanos", period.spent_nanos)
        pipe.hset(
            h,
            mapping={
                "limit": period.limit_micros,
                "hard": "1" if period.hard_limit else "0",
                "pg_reserved": period.reserved_micros,
            },
        )
        ttl = max(60, int(period.period_end.timestamp() - now) + 7 * 86_400)
        for key in (h, z, a):
            pipe.expire(key, ttl)
        pipe.sadd(keys.budget_periods_loaded(), period.pk)
    pipe.execute()
    return [
        PeriodView(id=p.pk, budget_id=str(p.budget_id), hard=p.hard_limit)
        for p in sorted(periods, key=lambda p: p.pk)
    ]


def hold_new_id() -> str:
    """A fresh hold id (never the client's request id: clients may reuse those)."""
    return f"gw-{uuid.uuid4().hex}"


def reserve_call(
    *, periods: list[PeriodView], hold_id: str, amount_micros: int, ttl_seconds: float
) -> BudgetReserve:
    """The reserve script's call for a hold (the gateway runs it in its admission step)."""
    now_ms = int(time.time() * 1000)
    return BudgetReserve(
        period_ids=[p.id for p in periods],
        hold_id=hold_id,
        amount_micros=amount_micros,
        now_ms=now_ms,
        expires_ms=now_ms + int(ttl_seconds * 1000),
    )


def reserve_outcome(
    reply: BudgetReserveReply, periods: list[PeriodView]
) -> Refusal | None | Literal[False]:
    """None: held; a Refusal; False: a period is not loaded (load and retry)."""
    if reply.status in ("held", "replay"):
        return None
    if reply.status == "not_loaded" or reply.period_index is None:
        return False
    return Refusal(
        period=periods[reply.period_index],
        limit_micros=reply.limit_micros,
        spent_micros=reply.spent_micros,
        reserved_micros=reply.reserved_micros + reply.pg_reserved_micros,
    )


def settle_call(
    *,
    periods: list[PeriodView],
    hold_id: str,
    tenant_id: str,
    principal_id: str | None,
    amount_micros: int,
    actual_micros: int,
) -> BudgetSettle:
    """The settle script's call: cut the hold to ``actual_micros``, pending the ledger's
    booking of the request (``hold_id`` is its ledger key)."""
    message = ""
    if actual_micros > 0:
        message = json.dumps(
            [
                tenant_id,
                principal_id,
                hold_id,
                amount_micros,
                actual_micros,
                [p.id for p in periods],
            ]
        )
    return BudgetSettle(
        period_ids=[p.id for p in periods],
        hold_id=hold_id,
        actual_micros=actual_micros,
        message=message,
        pending_expires_ms=int((time.time() + PENDING_SECONDS) * 1000),
    )


def budget_holds_expire() -> int:
    """Drop expired holds on every period ever loaded; returns how many (the beat sweep).

    Holds of a gateway that died are released here even if no request touches their
    period again.
    """
    client = ops.redis_client()
    now_ms = int(time.time() * 1000)
    dropped = 0
    for member in client.sscan_iter(keys.budget_periods_loaded(), count=500):
        dropped += budget_expire(client, period_id=int(member), now_ms=now_ms)
    return dropped


@dataclass
class SettleFlushResult:
    batches: int = 0
    settlements: int = 0
    inserted: int = 0
    charged_micros: int = 0  # the settled µ$ recorded (spend itself comes from the ledger)


def budget_settlements_flush(
    *, batch_size: int = 5000, max_batches: int = 20, lease_seconds: int = 300
) -> SettleFlushResult:
    """Record settled holds in PostgreSQL, one transaction per batch (idempotent).

    Each settlement becomes a ``BudgetReservation`` row (state settled): the record of
    what was held and what the gateway settled. It charges no budget: the request's
    spend reaches ``BudgetPeriod`` through its ledger row (``ledger_booking``), once.
    """
    client = ops.redis_client()
    claims = keys.budget_settle_claims()
    result = SettleFlushResult()
    stale_before = time.time() - lease_seconds
    # The client does not decode responses (the default): every reply item is bytes.
    stale = cast("list[bytes]", client.zrangebyscore(claims, "-inf", stale_before))
    batch_keys = [k.decode() for k in stale]
    while len(batch_keys) < max_batches:
        batch_key = keys.budget_settle_batch(uuid.uuid4().hex)
        if not list_claim(
            client,
            queue=keys.budget_settle_queue(),
            batch=batch_key,
            claims=claims,
            limit=batch_size,
            claimed_at=time.time(),
        ):
            break
        batch_keys.append(batch_key)
    for batch_key in batch_keys:
        raw = cast("list[bytes]", client.lrange(batch_key, 0, -1))
        if raw:
            _book(raw, result)
        client.delete(batch_key)
        client.zrem(claims, batch_key)
        result.batches += 1
    return result


def _book(raw: list[bytes], result: SettleFlushResult) -> None:
    rows = [json.loads(item) for item in raw]
    result.settlements += len(rows)
    now = datetime.now(tz=UTC)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO billing_budgetreservation (id, tenant_id, principal_id, request_id, "
                "kind, amount_micros, actual_micros, period_ids, state, expires_at, created_at, "
                "finished_at) "
                "SELECT gen_random_uuid(), t, p, r, 'request', a, x, "
                "ARRAY(SELECT jsonb_array_elements_text(ids)::bigint), 'settled', %s, %s, %s "
                "FROM unnest(%s::uuid[], %s::uuid[], %s::text[], %s::bigint[], %s::bigint[], "
                "%s::jsonb[]) AS u(t, p, r, a, x, ids) "
                "ON CONFLICT (tenant_id, request_id) DO NOTHING "
                "RETURNING period_ids, actual_micros",
                [
                    now + timedelta(seconds=1),
                    now,
                    now,
                    [r[0] for r in rows],
                    [r[1] for r in rows],
                    [r[2] for r in rows],
                    [r[3] for r in rows],
                    [r[4] for r in rows],
                    [json.dumps(r[5]) for r in rows],
                ],
            )
            inserted = cursor.fetchall()
    result.inserted += len(inserted)
    result.charged_micros += sum(actual for _, actual in inserted)


def budget_periods_live_adjust(*, deltas: dict[int, int]) -> int:
    """Mirror spend changes (period id → nanos) made in PostgreSQL onto the loaded Redis
    counters.

    ``spent_nanos`` in Redis is seeded once from PostgreSQL and then follows the ledger's
    bookings, so a change that only PostgreSQL saw (a reprice's recomputation) must be
    added here too, or the hot path keeps the old figure. Increments, not a ``SET``:
    bookings made meanwhile stay counted. Called after commit; returns how many loaded
    periods moved. Redis down: logged, the caller's commit stands (the hot path refuses
    with ``limits_unavailable`` until it is back).
    """
    moving = {pid: d for pid, d in deltas.items() if d}
    if not moving:
        return 0
    try:
        client = ops.redis_client()
        return sum(
            budget_adjust(client, period_id=pid, delta_nanos=delta)
            for pid, delta in sorted(moving.items())
        )
    except redis.RedisError:
        logger.warning("budget counters not mirrored to Redis: %s", moving, exc_info=True)
        return 0


def budget_periods_live_adjust_on_commit(*, deltas: dict[int, int]) -> None:
    """:func:`budget_periods_live_adjust` once the current transaction commits."""
    if any(deltas.values()):
        transaction.on_commit(partial(budget_periods_live_adjust, deltas=dict(deltas)))


def budget_period_live(*, period_id: int) -> dict[str, int]:
    """The Redis counters of one period (tests, the console): spent_nanos, reserved,
    limit, and ``spent`` (µ$, the rounding of spent_nanos, as ``spent_micros``)."""
    h, _, _ = period_keys(period_id)
    values = cast("dict[bytes, bytes]", ops.redis_client().hgetall(h))
    live = {k.decode(): int(v) for k, v in values.items()}
    if "spent_nanos" in live:
        live["spent"] = nanos_to_micros(live["spent_nanos"])
    return live


__all__ = [
    "BudgetPeriod",
    "PeriodView",
    "Refusal",
    "budget_holds_expire",
    "budget_period_live",
    "budget_periods_live_adjust",
    "budget_periods_live_adjust_on_commit",
    "budget_periods_load",
    "budget_settlements_flush",
]
