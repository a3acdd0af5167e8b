"""The rate-limit step: requests/min, tokens/min and concurrent requests per key and tenant.

One Lua script (``controlplane.redis.gateway``, together with the budget hold) checks and takes
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

from django.conf import settings

from controlplane.db import db_sync_to_async
from controlplane.redis import keys
from controlplane.redis.gateway import RateCheck, RateFinish, RateRefusal, RateScope
from gateway.errors import GatewayError
from gateway.selectors import CallerLimits, Limits, rate_limits_for_key
from gateway.singleflight import SingleFlightCache

REFRESH_SECONDS = 2.0

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
    check: RateCheck | None = None  # the admission script's rate-limit part


async def limits_for(tenant_id: str, key_id: str) -> CallerLimits:
    return await _limits.get(
        key_id,
        lambda: db_sync_to_async(rate_limits_for_key)(tenant_id=tenant_id, api_key_id=key_id),
    )


def forget() -> None:
    _limits.clear()


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
        admission.scopes.append((keys.ratelimit_scope_for_key(key_id), limits.key))
    if limits.tenant is not None:
        admission.scopes.append((keys.ratelimit_scope_for_tenant(tenant_id), limits.tenant))
    if not admission.scopes:
        return admission
    admission.tokens = estimated_tokens
    now_ms = int(time.time() * 1000)
    slot_ms = int((settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS + 30) * 1000)
    admission.check = RateCheck(
        scopes=_rate_scopes(admission),
        now_ms=now_ms,
        call_id=call_id,
        tokens=estimated_tokens,
        slot_expiry_ms=now_ms + slot_ms,
    )
    return admission


def _rate_scopes(admission: Admission) -> list[RateScope]:
    return [
        RateScope(
            scope=scope,
            requests_per_minute=limits.requests_per_minute or 0,
            tokens_per_minute=limits.tokens_per_minute or 0,
            concurrent_requests=limits.concurrent_requests or 0,
        )
        for scope, limits in admission.scopes
    ]


def admitted(admission: Admission, remaining: list[int]) -> None:
    """``rl_take``'s reply: the admitted answer's ``x-ratelimit-*`` headers."""
    admission.headers = _headers(admission.scopes, remaining)


def refusal(admission: Admission, refused: RateRefusal) -> GatewayError:
    """``rl_check``'s refusal as ``429 rate_limit_exceeded`` with ``Retry-After``."""
    admission.finished = True  # nothing was taken
    scope_index, kind = refused.scope_index, refused.kind
    retry_ms, limit = refused.retry_ms, refused.limit
    scope = "key" if keys.ratelimit_scope_is_key(admission.scopes[scope_index][0]) else "tenant"
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


def finish_part(admission: Admission | None, *, actual_tokens: int | None) -> RateFinish | None:
    """``rl_finish``'s part for what ``admission`` took (None: nothing to give back).
    Marks it finished: called once, by the closing step."""
    if admission is None or admission.finished or not admission.scopes:
        return None
    admission.finished = True
    refund = admission.tokens - actual_tokens if actual_tokens is not None else 0
    return RateFinish(
        scopes=admission.check.scopes if admission.check is not None else _rate_scopes(admission),
        call_id=admission.call_id,
        refund_tokens=refund,
        now_ms=int(time.time() * 1000),
    )
