"""Rate limits and the budget hold as one atomic step, and their release as another.

Admission is one Lua script in Redis (``controlplane.redis.gateway``): the key's and the
tenant's rate limits are checked (``gateway.ratelimit``), then billing's reserve script
takes the budget hold (``budget_reserve.lua``, included as a function), and only if both
pass are the rate limits taken. A rate-limit refusal takes nothing; a budget refusal
takes the request from requests/min (as a refused request always did) and nothing else.
Closing is one script too: the rate-limit slot and token correction (``rl_finish``) and
billing's settle script. Both run batched: concurrent requests of one process share
round trips, each request still one atomic step of its own inside Redis, so the
invariants of each script (a hard limit never exceeded by ``spent + reserved``, across
any number of processes) are exactly those of the scripts run one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.redis import gateway as steps
from controlplane.redis.batch import Call
from gateway import budget, ratelimit
from gateway.errors import GatewayError
from gateway.identity import Identity


async def admit(
    identity: Identity,
    admission: ratelimit.Admission,
    hold: budget.Hold | None,
    *,
    request_id: str,
) -> None:
    """Take ``admission`` and ``hold`` together, or raise 429 (rate limit, nothing taken)
    or 402 (budget, audited). A period Redis lost is reloaded and the step retried once."""
    scopes = len(admission.scopes)
    if not scopes and hold is None:
        return
    for attempt in range(2):
        reply = await steps.gateway_admit(
            rate=admission.check if scopes else None,
            budget=budget.reserve_call(hold) if hold is not None else None,
        )
        if reply.refusal is not None:
            raise ratelimit.refusal(admission, reply.refusal)
        if reply.budget is None:
            if scopes:
                ratelimit.admitted(admission, reply.remaining)
            return
        assert hold is not None
        admission.finished = True  # a budget refusal took nothing to give back
        await budget.reserve_outcome(identity, hold, reply.budget, request_id)  # raises 402
        if attempt == 0:  # Redis lost or expired a period's hash: reload, retry
            hold.periods = await budget.periods_for(identity, fresh=True)
            admission.finished = False
    raise GatewayError(503, "budget_unavailable", "Budget counters are unavailable.")


ClosePart = Call


def close_part(
    admission: ratelimit.Admission | None,
    hold: budget.Hold | None,
    *,
    actual_tokens: int | None,
    actual_micros: int,
) -> ClosePart | None:
    """The closing step for one request: give back the rate-limit slot (tokens corrected
    to ``actual_tokens``) and settle the hold at ``actual_micros``. None when there is
    nothing to close. Each part at most once."""
    return steps.gateway_close_call(
        rate=ratelimit.finish_part(admission, actual_tokens=actual_tokens),
        settle=budget.settle_call(hold, actual_micros=actual_micros),
    )


async def close(
    admission: ratelimit.Admission | None,
    hold: budget.Hold | None,
    *,
    actual_tokens: int | None,
    actual_micros: int,
) -> None:
    """Close one request's rate limits and hold (:func:`close_part`) in its own step."""
    part = close_part(admission, hold, actual_tokens=actual_tokens, actual_micros=actual_micros)
    if part is not None:
        await steps.gateway_close(part)


def queue_close(pipe: Any, parts: Sequence[ClosePart]) -> None:
    """The closing steps of ``parts`` as one script run on a caller's pipeline
    (``gateway.closing``: the same round trip as the usage records)."""
    steps.gateway_close_queue(pipe, parts)


async def rerun_close(parts: Sequence[ClosePart]) -> None:
    """Run closing steps again on their own (Redis lost the script: NOSCRIPT)."""
    await steps.gateway_close_rerun(parts)
