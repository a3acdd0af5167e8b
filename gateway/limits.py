"""Rate limits and the budget hold as one atomic step, and their release as another.

Admission is one Lua script in Redis: the key's and the tenant's rate limits are checked
(``gateway.ratelimit``), then billing's reserve script takes the budget hold
(``billing.services.budget_reservations.RESERVE_SCRIPT``, run unchanged as a function),
and only if both pass are the rate limits taken. A rate-limit refusal takes nothing; a
budget refusal takes the request from requests/min (as a refused request always did)
and nothing else. Closing is one script too: the rate-limit slot and token correction
(``rl_finish``) and billing's settle script. Both run through
``hotpath_redis.BatchedScript``: concurrent requests of one process share round trips,
each request still one atomic step of its own inside Redis, so the invariants of each
script (a hard limit never exceeded by ``spent + reserved``, across any number of
processes) are exactly those of the scripts run one by one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from billing.services import budget_reservations as holds
from gateway import budget, ratelimit
from gateway.errors import GatewayError
from gateway.hotpath_redis import BatchedScript
from gateway.identity import Identity

_PRELUDE = (
    ratelimit.FUNCTIONS
    + "\nlocal function budget_reserve(KEYS, ARGV)\n"
    + holds.RESERVE_SCRIPT
    + "\nend\nlocal function budget_settle(KEYS, ARGV)\n"
    + holds.SETTLE_SCRIPT
    + "\nend\n"
)

#: KEYS: rate-limit keys (2 per scope), then the budget periods' keys (3 per period).
#: ARGV: scopes, periods, then ``rl_check``'s ARGV (when scopes), then the reserve
#: script's ARGV (when periods). Returns {0, rl_take's reply} admitted,
#: {1, rl_check's refusal} or {2, the reserve script's reply} refused.
_ADMIT = BatchedScript(
    """
local ns, np = tonumber(ARGV[1]), tonumber(ARGV[2])
local rk, ra, bk, ba = {}, {}, {}, {}
for i = 1, 2 * ns do rk[i] = KEYS[i] end
for i = 1, 3 * np do bk[i] = KEYS[2 * ns + i] end
local nra = 0
if ns > 0 then nra = 4 + 3 * ns end
for i = 1, nra do ra[i] = ARGV[2 + i] end
for i = 1, #ARGV - 2 - nra do ba[i] = ARGV[2 + nra + i] end
local state
if ns > 0 then
  local refused
  refused, state = rl_check(rk, ra)
  if refused then return {1, refused} end
end
if np > 0 then
  local held = budget_reserve(bk, ba)
  if held[1] == 0 then
    if ns > 0 then rl_take(rk, ra, state, true) end
    return {2, held}
  end
  if held[1] == -1 then return {2, held} end
end
if ns > 0 then return {0, rl_take(rk, ra, state, false)} end
return {0, {1}}
""",
    prelude=_PRELUDE,
)

#: KEYS: rate-limit keys (2 per scope), then the settle script's KEYS. ARGV: scopes,
#: settle keys, ``rl_finish``'s ARGV (when scopes), the settle script's ARGV (when
#: settle keys). Returns the settle script's reply (0 without a hold).
_CLOSE = BatchedScript(
    """
local ns, nb = tonumber(ARGV[1]), tonumber(ARGV[2])
local rk, ra, bk, ba = {}, {}, {}, {}
for i = 1, 2 * ns do rk[i] = KEYS[i] end
for i = 1, nb do bk[i] = KEYS[2 * ns + i] end
local nra = 0
if ns > 0 then nra = 3 + ns end
for i = 1, nra do ra[i] = ARGV[2 + i] end
for i = 1, #ARGV - 2 - nra do ba[i] = ARGV[2 + nra + i] end
if ns > 0 then rl_finish(rk, ra) end
if nb > 0 then return budget_settle(bk, ba) end
return 0
""",
    prelude=_PRELUDE,
)


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
        keys, args = list(admission.keys), [str(scopes), "0", *admission.args]
        if hold is not None:
            budget_keys, budget_args = budget.reserve_part(hold)
            keys += budget_keys
            args[1] = str(len(hold.periods))
            args += budget_args
        status, reply = await _ADMIT(keys=keys, args=args)
        if int(status) == 1:
            raise ratelimit.refusal(admission, reply)
        if int(status) == 0:
            if scopes:
                ratelimit.admitted(admission, reply)
            return
        assert hold is not None
        admission.finished = True  # a budget refusal took nothing to give back
        await budget.reserve_outcome(identity, hold, reply, request_id)  # raises 402
        if attempt == 0:  # Redis lost or expired a period's hash: reload, retry
            hold.periods = await budget.periods_for(identity, fresh=True)
            admission.finished = False
    raise GatewayError(503, "budget_unavailable", "Budget counters are unavailable.")


ClosePart = tuple[list[str], list[str]]


def close_part(
    admission: ratelimit.Admission | None,
    hold: budget.Hold | None,
    *,
    actual_tokens: int | None,
    actual_micros: int,
) -> ClosePart | None:
    """KEYS and ARGV of the closing script for one request: give back the rate-limit slot
    (tokens corrected to ``actual_tokens``) and settle the hold at ``actual_micros``.
    None when there is nothing to close. Each part at most once."""
    finish = ratelimit.finish_part(admission, actual_tokens=actual_tokens)
    settle = budget.settle_part(hold, actual_micros=actual_micros)
    if finish is None and settle is None:
        return None
    keys: list[str] = []
    args = ["0", "0"]
    if finish is not None:
        keys += finish[0]
        args[0] = str(len(finish[0]) // 2)
        args += finish[1]
    if settle is not None:
        keys += settle[0]
        args[1] = str(len(settle[0]))
        args += settle[1]
    return keys, args


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
        await _CLOSE(keys=part[0], args=part[1])


def queue_close(pipe: Any, parts: Sequence[ClosePart]) -> None:
    """The closing steps of ``parts`` as one script run on a caller's pipeline
    (``gateway.closing``: the same round trip as the usage records)."""
    _CLOSE.queue(pipe, parts)


async def rerun_close(parts: Sequence[ClosePart]) -> None:
    """Run closing steps again on their own (Redis lost the script: NOSCRIPT)."""
    await asyncio.gather(*(_CLOSE(keys=keys, args=args) for keys, args in parts))
