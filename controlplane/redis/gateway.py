"""The gateway's two batched steps, typed: admission and closing.

Admission (``gateway_admit.lua``) checks the key's and the tenant's rate limits
(``ratelimit_functions.lua``), takes billing's budget hold (``budget_reserve.lua``,
included as a Lua function) and only if both pass takes the rate limits: one atomic
step per request. Closing (``gateway_close.lua``) gives back the rate-limit slot with
the token correction and runs billing's settle script (``budget_settle.lua``). Both run
through :class:`~controlplane.redis.batch.BatchedScript`: concurrent requests of one
process share round trips, each still its own atomic step.

Callers pass named parts (:class:`RateCheck`, :class:`RateFinish`, and billing's
:class:`~controlplane.redis.budget.BudgetReserve` / ``BudgetSettle``); how they are
packed into one KEYS/ARGV is this module's business alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from controlplane.redis import keys
from controlplane.redis.batch import BatchedScript, Call
from controlplane.redis.budget import BudgetReserve, BudgetReserveReply, BudgetSettle
from controlplane.redis.scripts import script


@dataclass(frozen=True)
class RateScope:
    """One rate-limit scope (``keys.ratelimit_scope_for_key`` / ``_for_tenant``) and its
    limits per minute (0: unlimited)."""

    scope: str
    requests_per_minute: int
    tokens_per_minute: int
    concurrent_requests: int


@dataclass(frozen=True)
class RateCheck:
    """Arguments of ``rl_check`` / ``rl_take``: take one request of ``tokens`` (its
    estimate) on every scope; its concurrency slot expires at ``slot_expiry_ms``."""

    scopes: Sequence[RateScope]
    now_ms: int
    call_id: str
    tokens: int
    slot_expiry_ms: int

    def keys(self) -> list[str]:
        return [key for s in self.scopes for key in keys.ratelimit(s.scope)]

    def args(self) -> list[str]:
        out = [str(self.now_ms), self.call_id, str(self.tokens), str(self.slot_expiry_ms)]
        for s in self.scopes:
            out += [str(s.requests_per_minute), str(s.tokens_per_minute)]
            out.append(str(s.concurrent_requests))
        return out


@dataclass(frozen=True)
class RateFinish:
    """Arguments of ``rl_finish``: free the slot, give back ``refund_tokens``."""

    scopes: Sequence[RateScope]
    call_id: str
    refund_tokens: int
    now_ms: int

    def keys(self) -> list[str]:
        return [key for s in self.scopes for key in keys.ratelimit(s.scope)]

    def args(self) -> list[str]:
        out = [self.call_id, str(self.refund_tokens), str(self.now_ms)]
        return out + [str(s.tokens_per_minute) for s in self.scopes]


@dataclass(frozen=True)
class RateRefusal:
    """``rl_check``'s refusal: the scope's index, the kind (1 requests, 2 tokens,
    3 concurrency, 4 too large for the limit at all), the retry delay and the limit."""

    scope_index: int
    kind: int
    retry_ms: int
    limit: int


@dataclass(frozen=True)
class AdmitReply:
    """``admitted`` (``remaining``: per scope, requests then tokens left),
    ``rate_refused`` (``refusal``), or ``budget`` (the hold's reply: refused or not
    loaded; the rate limits took the request alone, as a refused request always did)."""

    outcome: Literal["admitted", "rate_refused", "budget"]
    remaining: list[int]
    refusal: RateRefusal | None = None
    budget: BudgetReserveReply | None = None


_ADMIT = BatchedScript(script("gateway_admit"))
_CLOSE = BatchedScript(script("gateway_close"))


async def gateway_admit(*, rate: RateCheck | None, budget: BudgetReserve | None) -> AdmitReply:
    """One admission step (batched with this loop's concurrent ones)."""
    rate_keys = rate.keys() if rate is not None else []
    args = [str(len(rate.scopes) if rate is not None else 0), "0"]
    args += rate.args() if rate is not None else []
    call_keys = list(rate_keys)
    if budget is not None:
        call_keys += budget.keys()
        args[1] = str(len(budget.period_ids))
        args += budget.args()
    status, reply = await _ADMIT(keys=call_keys, args=args)
    if int(status) == 1:
        scope_index, kind, retry_ms, limit = (int(v) for v in reply[1:5])
        return AdmitReply(
            "rate_refused", [], refusal=RateRefusal(scope_index, kind, retry_ms, limit)
        )
    if int(status) == 2:
        return AdmitReply("budget", [], budget=BudgetReserveReply.parse(reply))
    return AdmitReply("admitted", [int(v) for v in reply[1:]])


def gateway_close_call(*, rate: RateFinish | None, settle: BudgetSettle | None) -> Call | None:
    """One request's closing step, packed (None: nothing to close)."""
    if rate is None and settle is None:
        return None
    call_keys: list[str] = []
    args = ["0", "0"]
    if rate is not None:
        call_keys += rate.keys()
        args[0] = str(len(rate.scopes))
        args += rate.args()
    if settle is not None:
        settle_keys = settle.keys()
        call_keys += settle_keys
        args[1] = str(len(settle_keys))
        args += settle.args()
    return call_keys, args


async def gateway_close(call: Call) -> None:
    """Run one closing step (batched with this loop's concurrent ones)."""
    await _CLOSE(keys=call[0], args=call[1])


def gateway_close_queue(pipe: Any, calls: Sequence[Call]) -> None:
    """The closing steps of ``calls`` as one script run on a caller's pipeline (its
    reply: a ``NoScriptError`` when Redis lost the script, see :func:`gateway_close_rerun`)."""
    _CLOSE.queue(pipe, calls)


async def gateway_close_rerun(calls: Sequence[Call]) -> None:
    """Run closing steps again on their own (Redis lost the script: NOSCRIPT)."""
    await asyncio.gather(*(gateway_close(call) for call in calls))
