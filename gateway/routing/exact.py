"""Event-exact routing: score every worker by the blocks it really holds, decide in Redis.

When the KV indexer (``workers.kv_indexer``) keeps the fleet's index fresh in Redis, the
prompt is tokenized and hashed exactly as the engine will (``workers.request_hashing``:
its tokenizer, block size, ``sha256_cbor``, the tenant salt in block 0) and every worker
is scored by the blocks it *really* holds (consecutive from block 0) or that any replica
has just routed to it (a pending placement, until the worker's ``BlockStored`` arrives).
One Redis script (``controlplane/redis/lua/kv_route.lua``) reads that, the fleet's in-flight
counts and its decayed request counts, decides and records the decision, atomically, so
the load bounds are fleet-wide and concurrent replicas agree on where a new prefix goes.
The mode of each decision is counted in ``cacheplane_gateway_route_total{mode}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter, Histogram

from controlplane.env import env_float
from controlplane.redis.fleet import KvRoute, kv_route
from gateway.directory import WorkerView
from gateway.routing import fleet
from gateway.routing.approximate import PRESSURE, PrefixIndex, approximate, prefix_chain
from gateway.routing.decision import RouteDecision
from workers import kv_index, load_state
from workers.request_hashing import request_block_hashes
from workers.routing import rendezvous_order

logger = logging.getLogger(__name__)

KEY_BLOCK = 1  # the block whose hash orders ties (the first: salted, per tenant)
# The settings module's typed helper reads these: a malformed value stops the process
# with one line naming the variable (a bare float() would die with a traceback, and a
# negative bound would make every worker "overloaded").
# Balance bound c: no worker takes a request that would put its share of recent traffic
# (decayed request count) above c x the fleet mean. This is what "busiest/mean" measures.
BALANCE = env_float("CACHEPLANE_ROUTING_BALANCE", 1.25, minimum=1.0)
# λ: within the bound, a worker's score is the share of the prompt it holds minus λ x its
# load relative to the mean (a worker 20 % busier than the mean loses 0.1 at λ = 0.5).
LOAD_WEIGHT = env_float("CACHEPLANE_ROUTING_LOAD_WEIGHT", 0.5, minimum=0.0)
# In-flight bound, a guard against pile-ups (a slow worker, a burst): a worker is skipped
# above ⌈(1 + ε) x the mean in flight⌉ (3 x: the balance bound does the balancing; at
# 1.0 it split batch fan-outs of one document and moved sessions mid-conversation).
# It only binds when 1 + ε < the pool's size.
EXACT_EPSILON = env_float("CACHEPLANE_ROUTING_HOLDER_EPSILON", 2.0, minimum=0.0)
# The request counts decay by 1 - 1/RATE_WINDOW per decision (fleet-wide): about the last
# few thousand requests count, measured in decisions so the bound is the same on any
# machine speed.
RATE_WINDOW = 4096.0
# Request counts are compared with a prior of this many requests on every worker: with few
# requests in the window, one request is not yet "25 % over the mean" (Laplace smoothing;
# without it, early sessions spilled mid-conversation).
LOAD_PRIOR = 16.0
MATCH_THRESHOLD = 0.3  # below this share of the prompt held anywhere: a placement, by load

ROUTES = Counter(
    "cacheplane_gateway_route",
    "Routing decisions by mode (exact = KV-event index, approximate = character guess).",
    ["mode", "reason"],
)
LOOKUP_SECONDS = Histogram(
    "cacheplane_gateway_route_lookup_seconds",
    "Hot-path cost of one routing lookup (hashing plus the Redis round trip).",
    ["mode"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1),
)


async def route_request(
    *,
    body: dict[str, Any],
    kind: str,
    text: str,
    workers: Sequence[WorkerView],
    salt: str,
    tenant_id: str,
    session: str | None,
    inflight: dict[str, int],
    approx_index: PrefixIndex,
    replica: str,
) -> RouteDecision:
    """Order ``workers`` for one request: event-exact when the index is fresh, else guessed.

    One Redis script (``kv_route.lua``, one round trip, atomic) reads the
    index's freshness, per worker the blocks held and held-or-claimed, and the fleet's
    in-flight and decayed request counts; stamps this replica's liveness; and, when the
    index is fresh, makes the exact decision below and records it: the blocks the chosen
    worker does not hold yet are claimed for it (a pending placement), one request is
    reserved on it and its request count goes up, so the next lookup of any replica
    already sees all three. Any Redis failure degrades to the approximate mode with this
    replica's own counts; routing never fails a request. While the index was stale at
    the pool's last look, the prompt is not tokenized (the call only reads); the first
    request that finds it fresh again hashes and decides at once.

    The exact decision is consistent hashing with bounded loads (Mirrokni et al.) where
    the preference is the cache, not a hash ring. Eligible: workers below the KV pressure
    threshold whose in-flight count stays within ``⌈(1 + EXACT_EPSILON) ×`` the mean⌉ and
    whose decayed request count stays within ``BALANCE ×`` the mean (with a prior of
    ``LOAD_PRIOR`` requests). Among them the best score wins, score = share of the prompt
    held or claimed there − ``LOAD_WEIGHT`` × (request count − mean) / mean; ties by
    rendezvous on the request's key (the same on every replica); ineligible workers
    follow, in score order, for failover. So a continuation stays on its holder while the
    holder is within the bound; a hot prefix whose holder is over it is replicated to the
    next best worker (which then holds it too, so later spills find it there); and a
    prompt mostly new to every worker (held share < ``MATCH_THRESHOLD``) is a placement by
    load alone, because the turns that follow it will go where it went.
    """
    started = time.perf_counter()
    block_size = workers[0].block_size
    # Recorded in the approximate index after the answer even in exact mode, so the
    # fallback is warm the moment the event index goes stale.
    chain = prefix_chain(text, salt=salt, block_size=block_size)
    enabled = fleet.index_enabled()
    pool_key = tuple(sorted(w.name for w in workers))
    # While the index was stale at this pool's last look (workers without KV events),
    # requests skip the tokenizing and hashing: the script still reads the index's
    # freshness (and the fleet's load), and the first request that finds it fresh again
    # hashes and decides at once, in a second call.
    hash_now = enabled and fleet.index_fresh.get(pool_key, True)
    # One prediction serves the whole pool only if every worker hashes the same way.
    specs = {w.hash_spec for w in workers}
    spec = workers[0].hash_spec if len(specs) == 1 else None
    spec_reason = workers[0].hash_reason if len(specs) == 1 else "mixed_hash_config"
    if spec is None:
        spec_reason = spec_reason or next((w.hash_reason for w in workers if w.hash_reason), "")
    client = fleet.fleet_client()
    load = dict(inflight)
    decision: RouteDecision | None = None
    reason = ""
    for _attempt in range(2):
        hashes = (
            request_block_hashes(body, kind=kind, spec=spec, salt=salt)
            if hash_now and spec is not None
            else None
        )
        # Ties (equal score) go by rendezvous on the first block (``KEY_BLOCK``), salted:
        # the same order on every replica, and one tenant's prompts prefer one worker.
        if session:
            key = f"s:{tenant_id}:{session}"
        elif hashes:
            key = str(hashes[min(len(hashes), KEY_BLOCK) - 1])
        else:
            key = f"{tenant_id}:{text[:256]}"
        ranked = rendezvous_order(key, workers)
        names = [w.name for w in ranked]
        if not enabled:
            reason = "disabled"
        elif hash_now and hashes is None:
            reason = spec_reason or "untokenized"  # tokenizer failed to load, or the body
        if client is None:
            reason = reason or "no_redis"
            break
        now = time.time()
        member = f"{replica}:{next(fleet.reservation_ids)}"
        try:
            call = KvRoute(
                workers=names,
                hashes=hashes or (),
                replica=replica,
                now=now,
                replica_ttl=load_state.REPLICA_TTL,
                stale_seconds=kv_index.STALE_SECONDS,
                pending_seconds=kv_index.PENDING_SECONDS,
                reserve_seconds=load_state.RESERVE_SECONDS,
                mine=[inflight.get(n, 0) for n in names],
                cool=[w.kv_usage < PRESSURE for w in ranked],
                threshold=MATCH_THRESHOLD,
                epsilon=EXACT_EPSILON,
                member=member,
                decide=hashes is not None,
                window=RATE_WINDOW,
                balance=BALANCE,
                load_weight=LOAD_WEIGHT,
                prior=LOAD_PRIOR,
            )
            reply = await kv_route(client, call)
            fresh, scored, fleet_load, order = reply.fresh, reply.claimed, reply.load, reply.order
        except Exception:
            logger.warning("routing lookup failed; approximate routing", exc_info=True)
            decision, reason = None, "redis_down"
            break
        # This replica's own counts are exact and newer than what it published.
        load = {n: max(fleet_load.get(n, 0), inflight.get(n, 0)) for n in names}
        if enabled:
            if len(fleet.index_fresh) > 1000:  # pools of finished tests
                fleet.index_fresh.clear()
            fleet.index_fresh[pool_key] = fresh
        if order:
            candidates = [ranked[i] for i in order]
            fleet.remember_reservation(candidates[0].name, now, member)
            holders = sorted((n for n in names if scored[n]), key=lambda n: -scored[n])
            decision = RouteDecision(
                candidates=candidates,
                mode="exact",
                reason="fresh",
                available_tokens=max(scored.values(), default=0) * block_size,
                routed_tokens=scored[candidates[0].name] * block_size,
                chain=chain,
                holders=tuple(holders),
            )
            break
        if enabled and not fresh and not reason:
            reason = "stale_index"
        if hash_now or not enabled or not fresh:
            break
        hash_now = True  # the index turned fresh since the last look: hash and decide
    if decision is None:
        decision = approximate(
            chain=chain,
            workers=workers,
            load=load,
            session=session,
            tenant_id=tenant_id,
            text=text,
            approx_index=approx_index,
            block_size=block_size,
        )
        decision.reason = reason
    ROUTES.labels(mode=decision.mode, reason=decision.reason).inc()
    LOOKUP_SECONDS.labels(mode=decision.mode).observe(time.perf_counter() - started)
    return decision
