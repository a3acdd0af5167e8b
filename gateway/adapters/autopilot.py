"""The cache-breakpoint autopilot: Anthropic ``cache_control`` placed from observed reuse,
OpenAI ``prompt_cache_key`` per tenant and prefix family.

Anthropic caches a prompt only up to an explicit breakpoint (at most 4 per request; a
prefix shorter than the model's minimum is not cached; a 5-minute write costs 1.25× the
input price, a 1-hour write 2×, a read 0.1×; at a breakpoint Anthropic also looks for
entries written at up to 20 earlier block positions). So the autopilot, per request of
a tenant whose switch is on (``ProviderCredential.cache_autopilot``) and that set no
breakpoint of its own (a client's breakpoints always win: nothing is added):

1. cuts the prompt at its block boundaries (end of ``tools``, of ``system``, of each
   message) and hashes each prefix (a chain of SHA-256 over canonical JSON);
2. looks the hashes up in the tenant's reuse history (Redis, per model, hourly buckets
   kept two hours): when each prefix was last seen, the gaps between its sightings, and
   whether the gateway wrote a conversation end there;
3. places, never below the model's minimum and at most 4: the stable prefix (tools and
   system) once it has been seen before; the end of the prompt when the conversation is
   continuing (an earlier boundary was seen) or the tenant's conversations usually
   continue (more than 22 % of ends written were continued: above that a 5-minute
   write's +0.25× pays for the 0.9× a read saves); and the longest prefix seen before
   when it lies more than 20 blocks before the end (out of the lookback's reach);
4. picks each breakpoint's TTL by the economic rule of the TTL autopilot
   (``billing.ttl_policy.keep_alive_seconds`` over the prefix's observed gaps): a
   keep-alive above 5 minutes buys the 1-hour write (one avoided 1.25× rewrite pays its
   0.75× premium), otherwise 5 minutes; 1-hour breakpoints precede 5-minute ones, as
   Anthropic requires.

The decision (e.g. ``system:1h,end:5m``) is returned for the request's log and response
header. OpenAI caches automatically above 1,024 tokens and routes by
``prompt_cache_key``: the autopilot sets it, when the client did not, to a digest of the
tenant and the prompt's stable prefix (system/developer messages and tools).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from billing.ttl_policy import MIN_HISTORY, keep_alive_seconds
from controlplane.redis import keys
from controlplane.redis.clients import async_client
from gateway.adapters.hosted import HostedModel

logger = logging.getLogger(__name__)

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
CONTINUE_SHARE = 0.22  # 0.25 / (1.25 - 0.10): the share of continued ends that pays
EXPLORE_ENDS = 5  # conversation ends written before the share is trusted
FIVE_MINUTES = 300
ONE_HOUR = 3600
GAP_MEMORY = 8


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _tokens(block: Any) -> int:
    if isinstance(block, dict) and block.get("type") == "text":
        return len(block.get("text") or "") // 4
    return len(_canonical(block)) // 4


def _has_client_breakpoint(body: dict[str, Any]) -> bool:
    if "cache_control" in body:
        return True
    blocks = [*(body.get("tools") or [])]
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for message in body.get("messages") or []:
        if isinstance(message.get("content"), list):
            blocks += message["content"]
    return any(isinstance(b, dict) and "cache_control" in b for b in blocks)


@dataclass
class _Boundary:
    name: str  # "tools", "system", "m<i>"
    digest: str
    tokens: int  # the prefix up to here (estimated: characters / 4)
    blocks: int  # blocks before and including this boundary
    place: Any  # the block that would carry cache_control (None: a string to convert)
    message: int | None = None  # the message index (for string content)


def _boundaries(body: dict[str, Any]) -> list[_Boundary]:
    found: list[_Boundary] = []
    chain = hashlib.sha256(_canonical(body.get("model")))
    tokens = blocks = 0

    def cut(name: str, segment: list[Any], place: Any, message: int | None = None) -> None:
        nonlocal tokens, blocks
        for block in segment:
            chain.update(_canonical(block))
            tokens += _tokens(block)
            blocks += 1
        found.append(_Boundary(name, chain.copy().hexdigest()[:32], tokens, blocks, place, message))

    if body.get("tools"):
        cut("tools", body["tools"], body["tools"][-1])
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = system = [{"type": "text", "text": system}]
    if isinstance(system, list) and system:
        cut("system", system, system[-1])
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            if content:
                block = {"type": "text", "text": content}
                cut(f"m{i}", [{"role": message.get("role")}, block], None, i)
        elif isinstance(content, list) and content:
            cut(f"m{i}", [{"role": message.get("role")}, *content], content[-1], i)
    return found


def _mark(body: dict[str, Any], boundary: _Boundary, ttl: str) -> None:
    control = {"type": "ephemeral", "ttl": ttl}
    if boundary.place is None:  # a string message: becomes one text block
        message = body["messages"][boundary.message or 0]
        message["content"] = [{"type": "text", "text": message["content"]}]
        boundary.place = message["content"][-1]
    boundary.place["cache_control"] = control


def _ttl(gaps: list[float]) -> str:
    """5m or 1h by the TTL autopilot's keep-alive rule over the prefix's gaps."""
    if not gaps:
        return "5m"
    if len(gaps) < MIN_HISTORY:
        keep = max(gaps) * 1.05 + 1.0
    else:
        keep = keep_alive_seconds(gaps=tuple(gaps), breakeven_gap=float(ONE_HOUR))
    return "1h" if keep > FIVE_MINUTES else "5m"


def _keys(tenant_id: str, model: str, now: float) -> tuple[str, str]:
    hour = int(now // ONE_HOUR)
    return (
        keys.autopilot_history(tenant_id, model, hour),
        keys.autopilot_history(tenant_id, model, hour - 1),
    )


async def place_breakpoints(
    *, tenant_id: str, model: HostedModel, body: dict[str, Any], now: float | None = None
) -> str:
    """Add ``cache_control`` to ``body`` (in place) from the tenant's observed reuse and
    record this request's prefixes; returns the decision for the request log."""
    if _has_client_breakpoint(body):
        return "client"
    now = time.time() if now is None else now
    cuts = _boundaries(body)
    if not cuts:
        return "none:empty"
    current, previous = _keys(tenant_id, model.name, now)
    fields = [c.digest for c in cuts] + ["_ends", "_continued"]
    try:
        client = async_client()
        pipe = client.pipeline(transaction=False)
        pipe.hmget(current, fields)
        pipe.hmget(previous, fields)
        fresh, old = await pipe.execute()
    except Exception:  # the autopilot is an optimisation: never fail a request for it
        logger.warning("autopilot history unreachable; no breakpoints placed")
        return "none:history_unavailable"
    seen: list[dict[str, Any] | None] = []
    for a, b in zip(fresh[: len(cuts)], old[: len(cuts)], strict=True):
        raw = a or b
        seen.append(json.loads(raw) if raw else None)
    ends = sum(int(x or 0) for x in (fresh[-2], old[-2]))
    continued = sum(int(x or 0) for x in (fresh[-1], old[-1]))
    chosen: dict[int, str] = {}  # boundary index → ttl
    eligible = [i for i, c in enumerate(cuts) if c.tokens >= model.min_cache_tokens]
    stable = [i for i, c in enumerate(cuts) if c.name in ("tools", "system")]
    stable_seen = seen[stable[-1]] if stable else None
    if stable_seen is not None and stable[-1] in eligible:
        chosen[stable[-1]] = _ttl(stable_seen["g"])
    last = len(cuts) - 1
    interior_seen = [i for i in range(last) if seen[i] is not None and cuts[i].name[0] == "m"]
    continuing = bool(interior_seen)
    if continuing and any(seen[i].get("w") for i in interior_seen):  # type: ignore[union-attr]
        continued_now = 1
    else:
        continued_now = 0
    usually = ends < EXPLORE_ENDS or continued >= CONTINUE_SHARE * ends
    write_end = last in eligible and (continuing or (usually and len(cuts) > 1))
    if write_end:
        recent = seen[interior_seen[-1]] if interior_seen else None
        gaps = list(recent["g"]) if recent else []
        if recent:
            gaps.append(now - recent["t"])
        chosen[last] = _ttl(gaps[-GAP_MEMORY:])
    if interior_seen and interior_seen[-1] in eligible:
        anchor = interior_seen[-1]
        reach = cuts[last].blocks - cuts[anchor].blocks
        if not write_end or reach > LOOKBACK_BLOCKS:
            chosen[anchor] = _ttl(seen[anchor]["g"])  # type: ignore[index]
    placed = sorted(chosen)[-MAX_BREAKPOINTS:]
    decision: list[str] = []
    short = False
    for i in placed:
        ttl = "5m" if short else chosen[i]
        short = short or ttl == "5m"
        _mark(body, cuts[i], ttl)
        decision.append(f"{'end' if i == last else cuts[i].name}:{ttl}")
    await _record(
        current,
        cuts,
        seen,
        now,
        wrote_end=last in placed,
        continued=continued_now,
    )
    return ",".join(decision) if decision else "none:no_reuse"


async def _record(
    key: str,
    cuts: list[_Boundary],
    seen: list[dict[str, Any] | None],
    now: float,
    *,
    wrote_end: bool,
    continued: int,
) -> None:
    values: dict[Any, Any] = {}  # redis-py types its mapping keys invariantly
    for i, (cut, before) in enumerate(zip(cuts, seen, strict=True)):
        gaps = list(before["g"]) if before else []
        if before:
            gaps = [*gaps, round(now - before["t"], 3)][-GAP_MEMORY:]
        entry: dict[str, Any] = {"t": now, "g": gaps}
        if (before and before.get("w")) or (wrote_end and i == len(cuts) - 1):
            entry["w"] = 1
        values[cut.digest] = json.dumps(entry, separators=(",", ":"))
    try:
        pipe = async_client().pipeline(transaction=False)
        pipe.hset(key, mapping=values)
        if wrote_end:
            pipe.hincrby(key, "_ends", 1)
        if continued:
            pipe.hincrby(key, "_continued", 1)
        pipe.expire(key, 2 * ONE_HOUR)
        await pipe.execute()
    except Exception:
        logger.warning("autopilot history not recorded")


def prompt_cache_key(*, tenant_id: str, body: dict[str, Any]) -> str | None:
    """Set OpenAI's ``prompt_cache_key`` (when the client did not) to the tenant's digest
    of the stable prefix; returns the decision (None: the client's own key is kept)."""
    if body.get("prompt_cache_key"):
        return "client"
    stable = [m for m in body.get("messages") or [] if m.get("role") in ("system", "developer")]
    family = hashlib.sha256(
        _canonical({"tenant": tenant_id, "stable": stable, "tools": body.get("tools") or []})
    ).hexdigest()[:24]
    body["prompt_cache_key"] = f"cp-{family}"
    return f"prompt_cache_key:cp-{family}"
