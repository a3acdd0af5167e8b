"""The rate-limit step: requests/min, tokens/min and concurrent requests per key and tenant.

One Lua script (``gateway.limits``, together with the budget hold) checks and takes
every limit of the key's row and of its tenant's row at once (token buckets refilled
continuously, so a minute's allowance is never spent twice at a window edge;
concurrency as a sorted set of in-flight ids with an expiry, so a gateway that dies
frees its slots). Tokens are taken at the request's estimate (prompt characters / 4 +
its output allowance, as OpenAI counts) and corrected with the real usage when it ends.
A refusal is ``429`` with ``Retry-After`` and OpenAI's ``x-ratelimit-*`` headers; an
admitted answer carries the headers too.

Why not a library: ``limits`` and friends take one round trip per limit and window;
this is one round trip for all six, which is what the hot path can afford.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from controlplane.db import db_sync_to_async
from gateway.errors import GatewayError
from gateway.selectors import CallerLimits, Limits, rate_limits_for_key
from gateway.singleflight import SingleFlightCache

REFRESH_SECONDS = 2.0

#: Lua functions of the rate-limit step, run inside the gateway's admission script
#: (``gateway.limits``) together with the budget hold, so both are one atomic step.
#: KEYS per scope: bucket hash, in-flight sorted set. ARGV: now ms, call id, tokens,
#: slot expiry ms, then per scope: rpm, tpm, concurrency (0: unlimited).
#: ``rl_check`` writes nothing: it returns {0, scope, kind (1 requests, 2 tokens,
#: 3 concurrency, 4 too large), retry ms, limit} for a refusal, else nil and the state
#: ``rl_take`` applies (``requests_only``: just the request, for a call a later check
#: refused). ``rl_take`` returns {1, remaining requests, remaining tokens, ...per scope}.
#: ``rl_finish`` (KEYS as above; ARGV: call id, token correction (estimate - actual),
#: now ms, then per scope: tpm) frees the slot and corrects the token bucket.
FUNCTIONS = """
local function rl_check(KEYS, ARGV)
  local now, cost = tonumber(ARGV[1]), tonumber(ARGV[3])
  local state = {}
  for i = 0, #KEYS / 2 - 1 do
    local b, z = KEYS[2 * i + 1], KEYS[2 * i + 2]
    local rpm, tpm = tonumber(ARGV[5 + 3 * i]), tonumber(ARGV[6 + 3 * i])
    local conc = tonumber(ARGV[7 + 3 * i])
    local v = redis.call('HMGET', b, 'r', 'rts', 't', 'tts')
    local r, t = rpm, tpm
    if rpm > 0 and v[1] then
      r = math.min(rpm, tonumber(v[1]) + (now - tonumber(v[2])) * rpm / 60000)
    end
    if tpm > 0 and v[3] then
      t = math.min(tpm, tonumber(v[3]) + (now - tonumber(v[4])) * tpm / 60000)
    end
    if rpm > 0 and r < 1 then
      return {0, i, 1, math.ceil((1 - r) * 60000 / rpm), rpm}, nil
    end
    if tpm > 0 and cost > tpm then return {0, i, 4, 60000, tpm}, nil end
    if tpm > 0 and t < cost then
      return {0, i, 2, math.ceil((cost - t) * 60000 / tpm), tpm}, nil
    end
    if conc > 0 then
      redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
      if redis.call('ZCARD', z) >= conc then return {0, i, 3, 1000, conc}, nil end
    end
    state[i] = {r, t, rpm, tpm, conc}
  end
  return nil, state
end

local function rl_take(KEYS, ARGV, state, requests_only)
  local id, cost, expires = ARGV[2], tonumber(ARGV[3]), ARGV[4]
  local out = {1}
  for i = 0, #KEYS / 2 - 1 do
    local b, z = KEYS[2 * i + 1], KEYS[2 * i + 2]
    local s = state[i]
    local tokens = s[4] > 0 and not requests_only
    if s[3] > 0 then redis.call('HSET', b, 'r', tostring(s[1] - 1), 'rts', ARGV[1]) end
    if tokens then redis.call('HSET', b, 't', tostring(s[2] - cost), 'tts', ARGV[1]) end
    if s[3] > 0 or tokens then redis.call('PEXPIRE', b, 120000) end
    if s[5] > 0 and not requests_only then
      redis.call('ZADD', z, expires, id)
      redis.call('PEXPIRE', z, 3600000)
    end
    out[#out + 1] = math.floor(s[1] - 1)
    out[#out + 1] = math.floor(s[2] - cost)
  end
  return out
end

local function rl_finish(KEYS, ARGV)
  local id, refund, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
  for i = 0, #KEYS / 2 - 1 do
    local b, z = KEYS[2 * i + 1], KEYS[2 * i + 2]
    redis.call('ZREM', z, id)
    local tpm = tonumber(ARGV[4 + i])
    if tpm > 0 and refund ~= 0 then
      local v = redis.call('HMGET', b, 't', 'tts')
      if v[1] then
        local t = math.min(tpm, tonumber(v[1]) + (now - tonumber(v[2])) * tpm / 60000 + refund)
        redis.call('HSET', b, 't', tostring(t), 'tts', ARGV[3])
      end
    end
  end
  return 1
end
"""

_KINDS = {1: "requests", 2: "tokens", 3: "concurrent requests", 4: "tokens"}
# Event-loop only: key id → its limits and its tenant's.
_limits: SingleFlightCache[str, CallerLimits] = SingleFlightCache(
    maxsize=50_000, ttl=REFRESH_SECONDS
)


@dataclass
class Admission:
    """What one admitted request took, to give back when it ends."""

    call_id: str
    scopes: list[tuple[str, Limits]] = field(default_factory=list)
    tokens: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    weight: int = 1
    finished: bool = False
    keys: list[str] = field(default_factory=list)  # of the admission script's rl part
    args: list[str] = field(default_factory=list)


async def limits_for(tenant_id: str, key_id: str) -> CallerLimits:
    return await _limits.get(
        key_id,
        lambda: db_sync_to_async(rate_limits_for_key)(tenant_id=tenant_id, api_key_id=key_id),
    )


def forget() -> None:
    _limits.clear()


def _prefix() -> str:
    return settings.CACHEPLANE_GATEWAY_RATELIMIT_PREFIX


def _keys(scope: str) -> list[str]:
    return [f"{_prefix()}:{scope}:bucket", f"{_prefix()}:{scope}:inflight"]


def _duration(ms: float) -> str:
    """OpenAI's reset format: ``1s``, ``6m0s``, ``20ms``."""
    if ms < 1000:
        return f"{max(int(ms), 1)}ms"
    seconds = math.ceil(ms / 1000)
    return f"{seconds // 60}m{seconds % 60}s" if seconds >= 60 else f"{seconds}s"


def _headers(scopes: list[tuple[str, Limits]], remaining: list[int]) -> dict[str, str]:
    """The tightest scope's figures (the one a client would hit first)."""
    headers: dict[str, str] = {}
    requests = [
        (remaining[2 * i], s.requests_per_minute)
        for i, (_, s) in enumerate(scopes)
        if s.requests_per_minute
    ]
    tokens = [
        (remaining[2 * i + 1], s.tokens_per_minute)
        for i, (_, s) in enumerate(scopes)
        if s.tokens_per_minute
    ]
    for name, found in (("requests", requests), ("tokens", tokens)):
        if not found:
            continue
        left, limit = min(found, key=lambda pair: pair[0] / pair[1])
        left = max(0, left)
        headers[f"x-ratelimit-limit-{name}"] = str(limit)
        headers[f"x-ratelimit-remaining-{name}"] = str(left)
        headers[f"x-ratelimit-reset-{name}"] = _duration((limit - left) * 60_000 / limit)
    return headers


async def plan(*, tenant_id: str, key_id: str, call_id: str, estimated_tokens: int) -> Admission:
    """What this request must take from the key's and the tenant's limits (no I/O in
    steady state); ``gateway.limits.admit`` takes it, atomically with the budget hold."""
    limits = await limits_for(tenant_id, key_id)
    admission = Admission(call_id=call_id, weight=limits.weight)
    if limits.key is not None:
        admission.scopes.append((f"k:{key_id}", limits.key))
    if limits.tenant is not None:
        admission.scopes.append((f"t:{tenant_id}", limits.tenant))
    if not admission.scopes:
        return admission
    admission.tokens = estimated_tokens
    now_ms = int(time.time() * 1000)
    slot_ms = int((settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS + 30) * 1000)
    admission.args = [str(now_ms), call_id, str(estimated_tokens), str(now_ms + slot_ms)]
    for scope, scope_limits in admission.scopes:
        admission.keys += _keys(scope)
        admission.args += [
            str(scope_limits.requests_per_minute or 0),
            str(scope_limits.tokens_per_minute or 0),
            str(scope_limits.concurrent_requests or 0),
        ]
    return admission


def admitted(admission: Admission, reply: list[Any]) -> None:
    """``rl_take``'s reply: the admitted answer's ``x-ratelimit-*`` headers."""
    admission.headers = _headers(admission.scopes, [int(v) for v in reply[1:]])


def refusal(admission: Admission, reply: list[Any]) -> GatewayError:
    """``rl_check``'s refusal as ``429 rate_limit_exceeded`` with ``Retry-After``."""
    admission.finished = True  # nothing was taken
    scope_index, kind, retry_ms, limit = (int(v) for v in reply[1:5])
    scope = "key" if admission.scopes[scope_index][0].startswith("k:") else "tenant"
    what = _KINDS[kind]
    retry_s = max(1, math.ceil(retry_ms / 1000))
    headers = {"Retry-After": str(retry_s)}
    if kind in (1, 2, 4):
        name = "requests" if kind == 1 else "tokens"
        headers[f"x-ratelimit-limit-{name}"] = str(limit)
        headers[f"x-ratelimit-remaining-{name}"] = "0"
        headers[f"x-ratelimit-reset-{name}"] = _duration(retry_ms)
    if kind == 4:
        message = (
            f"This request needs {admission.tokens} tokens, more than the {scope}'s limit of "
            f"{limit} tokens per minute allows at all: lower max_tokens or the prompt."
        )
    elif kind == 3:
        message = f"The {scope} already has {limit} concurrent requests in flight."
    else:
        message = f"Rate limit of {limit} {what} per minute reached for this {scope}."
    return GatewayError(429, "rate_limit_exceeded", message, headers=headers)


def finish_part(
    admission: Admission | None, *, actual_tokens: int | None
) -> tuple[list[str], list[str]] | None:
    """KEYS and ARGV of ``rl_finish`` for what ``admission`` took (None: nothing to give
    back). Marks it finished: called once, by the closing step."""
    if admission is None or admission.finished or not admission.scopes:
        return None
    admission.finished = True
    refund = admission.tokens - actual_tokens if actual_tokens is not None else 0
    args = [admission.call_id, str(refund), str(int(time.time() * 1000))]
    for _scope, scope_limits in admission.scopes:
        args.append(str(scope_limits.tokens_per_minute or 0))
    return admission.keys, args
