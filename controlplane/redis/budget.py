"""Typed wrappers of billing's budget-hold scripts (the logic is billing's; see
``billing.services.budget_reservations`` for the invariants).

``budget_reserve.lua`` and ``budget_settle.lua`` run inside the gateway's batched
admission and closing scripts (``controlplane.redis.gateway``, by include); their
arguments and replies are built and parsed here, by name. ``budget_expire.lua``,
``budget_adjust.lua`` and ``budget_book.lua`` (the ledger's bookings) run on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from controlplane.redis import keys
from controlplane.redis.scripts import script


def _period_keys(period_ids: Sequence[int]) -> list[str]:
    return [key for period_id in period_ids for key in keys.budget_period(period_id)]


@dataclass(frozen=True)
class BudgetReserve:
    """Arguments of ``budget_reserve.lua``: hold ``amount_micros`` on every period."""

    period_ids: Sequence[int]
    hold_id: str
    amount_micros: int
    now_ms: int
    expires_ms: int

    def keys(self) -> list[str]:
        return _period_keys(self.period_ids)

    def args(self) -> list[str]:
        return [self.hold_id, str(self.amount_micros), str(self.now_ms), str(self.expires_ms)]


@dataclass(frozen=True)
class BudgetReserveReply:
    """``held`` (or ``replay``: already held), ``refused`` by the period at
    ``period_index`` (its figures), or ``not_loaded`` (load the periods and retry)."""

    status: Literal["held", "replay", "refused", "not_loaded"]
    period_index: int | None = None
    limit_micros: int = 0
    spent_micros: int = 0
    reserved_micros: int = 0
    pg_reserved_micros: int = 0

    @classmethod
    def parse(cls, reply: Sequence[Any]) -> BudgetReserveReply:
        status = int(reply[0])
        if status == 1:
            return cls("held")
        if status == 2:
            return cls("replay")
        if status == -1:
            return cls("not_loaded", period_index=int(reply[1]))
        return cls(
            "refused",
            period_index=int(reply[1]),
            limit_micros=int(reply[2]),
            spent_micros=int(reply[3]),
            reserved_micros=int(reply[4]),
            pg_reserved_micros=int(reply[5]),
        )


@dataclass(frozen=True)
class BudgetSettle:
    """Arguments of ``budget_settle.lua``: cut the hold to ``actual_micros`` (pending the
    ledger's booking, until ``pending_expires_ms``) and queue ``message`` for the flush
    (empty: a release, nothing held)."""

    period_ids: Sequence[int]
    hold_id: str
    actual_micros: int
    message: str
    marker_ttl_seconds: int = 86_400
    pending_expires_ms: int = 0

    def keys(self) -> list[str]:
        return [
            *_period_keys(self.period_ids),
            keys.budget_hold_done(self.hold_id),
            keys.budget_settle_queue(),
        ]

    def args(self) -> list[str]:
        return [
            self.hold_id,
            str(self.actual_micros),
            self.message,
            str(self.marker_ttl_seconds),
            str(self.pending_expires_ms),
        ]


def budget_expire(client: Any, *, period_id: int, now_ms: int) -> int:
    """Drop the expired holds of one period; returns how many."""
    return int(
        script("budget_expire").run(client, keys=list(keys.budget_period(period_id)), args=[now_ms])
    )


def budget_adjust(client: Any, *, period_id: int, delta_nanos: int) -> bool:
    """Add ``delta_nanos`` to a loaded period's ``spent_nanos``; False when not loaded."""
    return bool(
        int(
            script("budget_adjust").run(
                client, keys=[keys.budget_period(period_id)[0]], args=[str(delta_nanos)]
            )
        )
    )


def budget_book(
    client: Any, *, period_id: int, nanos: int, hold_ids: Sequence[str], marker_ttl: int = 86_400
) -> bool:
    """The ledger booked ``nanos`` on a period: drop the booked requests' holds and add the
    nanos to a loaded period's ``spent_nanos``; False when the period is not loaded."""
    return bool(
        int(
            script("budget_book").run(
                client,
                keys=[*keys.budget_period(period_id), *map(keys.budget_hold_done, hold_ids)],
                args=[str(nanos), str(marker_ttl), *hold_ids],
            )
        )
    )


def budget_reserve(client: Any, call: BudgetReserve) -> BudgetReserveReply:
    """``budget_reserve.lua`` on its own (the gateway runs it inside its admission step;
    tests and tools run it alone)."""
    reply = script("budget_reserve").run(client, keys=call.keys(), args=call.args())
    return BudgetReserveReply.parse(reply)


def budget_settle(client: Any, call: BudgetSettle) -> bool:
    """``budget_settle.lua`` on its own; False when the hold was already settled."""
    return bool(int(script("budget_settle").run(client, keys=call.keys(), args=call.args())))
