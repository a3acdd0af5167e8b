"""Choosing a worker: prefix-affine, load-bounded, memory-aware, with failover order.

1. A request naming a cache goes to the workers the cache was warmed on (rendezvous
   order of its routing key — the same order the warmer used).
2. Otherwise the routing key is a hash chain over the first blocks of the *salted*
   prompt (characters stand in for tokens: ``block_size × 4`` characters a block, so no
   tokenizer is needed on the hot path), or the session id when the client sends
   ``X-Session-Id``. A prefix index remembers the last few workers that served each chain
   (most recent first), so the holders of the longest remembered chain come first; a new
   prefix falls to rendezvous hashing of its first block.
3. Bounded load: a worker that would exceed ``⌈(1 + ε) × average⌉`` in-flight requests is
   skipped (consistent hashing with bounded loads), as is one whose KV usage is above the
   pressure threshold while a cooler one exists. A request that spills off a busy holder
   makes its new worker one more holder instead of replacing the old one, so a hot prefix
   settles on a few workers and later spills find it there too.
The result is an ordered list: the gateway fails over to the next on connection errors.

Event-exact mode (:func:`route_request`, the one call the gateway's route step makes):
when the KV indexer (``workers.kv_indexer``) keeps the fleet's index fresh in Redis, the
prompt is tokenized and hashed exactly as the engine will (``workers.request_hashing``:
its tokenizer, block size, ``sha256_cbor``, the tenant salt in block 0) and every worker
is scored by the blocks it *really* holds (consecutive from block 0). The same Redis round
trip reads the fleet's in-flight counts (``workers.load_state``), so the load bound is
fleet-wide. The character-based index above stays the fallback whenever the index is
stale, Redis is unreachable, or the engine's tokenizer is unknown here; the mode of each
decision is counted in ``cacheplane_gateway_route_total{mode}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Histogram

from gateway.directory import WorkerView
from workers import kv_index, load_state
from workers.request_hashing import request_block_hashes
from workers.routing import rendezvous_order

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
MAX_CHAIN_BLOCKS = 32
EPSILON = 0.25
HOLDERS = 3  # workers remembered per chain hash
PRESSURE = 0.85
KEY_BLOCK = 1  # exact mode: the block whose hash places a new prefix (the first)
PENDING_SECONDS = 3.0  # how long a routed-but-not-yet-evented prefix counts as held
EXACT_EPSILON = 1.0  # exact mode's load bound for real holders: 2 x the mean in flight
MATCH_THRESHOLD = 0.3  # exact mode: below this share of the prompt held, place by load

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


def prefix_chain(
    text: str, *, salt: str, block_size: int, blocks: int = MAX_CHAIN_BLOCKS
) -> list[str]:
    """Hashes of the first full blocks of ``text``; the salt enters block 0 only, as in vLLM."""
    width = block_size * CHARS_PER_TOKEN
    chain: list[str] = []
    parent = salt
    for i in range(min(blocks, len(text) // width)):
        block = text[i * width : (i + 1) * width]
        parent = hashlib.blake2b(f"{parent}\x00{block}".encode(), digest_size=12).hexdigest()
        chain.append(parent)
    return chain


class PrefixIndex:
    """Chain hash → the last ``HOLDERS`` workers that received it, most recent first
    (LRU-bounded; approximate by design: a holder may have evicted the blocks since)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def holders(self, chain: Sequence[str]) -> tuple[tuple[str, ...], int]:
        """The holders of the longest remembered prefix of ``chain`` and its depth."""
        for depth in range(len(chain), 0, -1):
            workers = self._entries.get(chain[depth - 1])
            if workers is not None:
                return workers, depth
        return (), 0

    def longest(self, chain: Sequence[str]) -> tuple[str | None, int]:
        """The most recent holder of the longest remembered prefix and its depth."""
        workers, depth = self.holders(chain)
        return (workers[0] if workers else None), depth

    def record(self, chain: Sequence[str], worker: str) -> None:
        for h in chain:
            held = self._entries.get(h, ())
            self._entries[h] = (worker, *(w for w in held if w != worker))[:HOLDERS]
            self._entries.move_to_end(h)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def forget_worker(self, worker: str) -> None:
        for key, held in list(self._entries.items()):
            if worker in held:
                rest = tuple(w for w in held if w != worker)
                if rest:
                    self._entries[key] = rest
                else:
                    del self._entries[key]


def order_candidates(
    *,
    key: str,
    workers: Sequence[WorkerView],
    inflight: dict[str, int],
    preferred: str | Sequence[str] | None = None,
    epsilon: float = EPSILON,
) -> list[WorkerView]:
    """Failover order: preferred workers (in their order) if not overloaded, then rendezvous
    order; a worker over the load bound or the KV pressure threshold goes to the back."""
    if not workers:
        return []
    ranked = rendezvous_order(key, workers)
    if preferred:
        first = (preferred,) if isinstance(preferred, str) else tuple(preferred)
        ranked.sort(key=lambda w: first.index(w.name) if w.name in first else len(first))
    total = sum(inflight.get(w.name, 0) for w in workers) + 1
    # The ceiling is the bound of Mirrokni et al.: with few requests in flight, a plain
    # (1 + ε) × average would already turn away a worker at the average.
    bound = math.ceil((1 + epsilon) * total / len(workers))
    cool = [w for w in ranked if w.kv_usage < PRESSURE]
    pool = cool or ranked
    within = [w for w in pool if inflight.get(w.name, 0) + 1 <= bound]
    rest = [w for w in ranked if w not in within]
    return within + rest


def pool_under_pressure(workers: Sequence[WorkerView]) -> bool:
    """The pool's KV usage (mean of its workers) is above the pressure threshold."""
    return bool(workers) and sum(w.kv_usage for w in workers) / len(workers) > PRESSURE


# --- event-exact routing ------------------------------------------------------------------


@dataclass
class RouteDecision:
    """What the route step needs: failover order and what the choice predicts."""

    candidates: list[WorkerView]
    mode: str  # "exact" | "approximate"
    reason: str  # why this mode ("fresh", "stale_index", "redis_down", "no_tokenizer", ...)
    available_tokens: int  # longest cached prefix anywhere in the pool (predicted)
    routed_tokens: int  # predicted cached tokens on candidates[0]
    chain: list[str] = field(default_factory=list)  # record in the approximate index
    holders: tuple[str, ...] = ()


class PendingIndex:
    """Block hashes this replica just routed, before the worker's events confirm them.

    Closes the gap llm-d closes with speculative entries: two requests for one new prefix
    a few milliseconds apart both go where the first went. Entries expire after
    ``PENDING_SECONDS``; by then the indexer has the real state.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[int, tuple[str, float]] = OrderedDict()

    def depth(self, hashes: Sequence[int], worker: str, now: float) -> int:
        depth = 0
        for h in hashes:
            entry = self._entries.get(h)
            if entry is None or entry[0] != worker or now - entry[1] > PENDING_SECONDS:
                break
            depth += 1
        return depth

    def record(self, hashes: Sequence[int], worker: str, now: float) -> None:
        for h in hashes:
            self._entries[h] = (worker, now)
            self._entries.move_to_end(h)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)


pending_index = PendingIndex()


def _redis_url() -> str | None:
    from django.conf import settings

    if settings.configured:
        return getattr(settings, "REDIS_URL", None)
    return os.environ.get("REDIS_URL")


def _index_enabled() -> bool:
    from django.conf import settings

    mode = (
        getattr(settings, "CACHEPLANE_ROUTING_INDEX", None)
        if settings.configured
        else os.environ.get("CACHEPLANE_ROUTING_INDEX")
    )
    return (mode or "kv_events") == "kv_events"


def fleet_client() -> Any | None:
    """This event loop's hot-path Redis connection for routing (None without Redis):
    replies within a second, or routing falls back to the approximate mode."""
    url = _redis_url()
    if not url:
        return None
    from gateway.hotpath_redis import connection

    return connection(url=url, timeout=1.0)


async def publish_loads(*, replica: str, deltas: dict[str, int]) -> None:
    """Add each worker's delta to this replica's in-flight counts in the fleet state."""
    client = fleet_client()
    if client is None:
        return
    try:
        pipe = client.pipeline(transaction=False)
        now = time.time()
        for worker, delta in deltas.items():
            load_state.queue_add(pipe, replica=replica, worker=worker, delta=delta, now=now)
        await pipe.execute()
    except Exception:  # Redis down: others see this replica's load once it is back
        logger.debug("fleet load update failed", exc_info=True)


#: Workers (a tuple of names) → whether the KV index was fresh for them at the last look.
#: A stale index (no KV events, e.g. workers without ``--kv-events-config``) skips the
#: tokenizing, hashing and lookup of every request; its liveness stamps are still read in
#: the same round trip, so the first request after the index turns fresh looks it up.
_index_fresh: dict[tuple[str, ...], bool] = {}
#: Replica → when it last stamped its liveness (the beat needs refreshing well within
#: ``load_state.REPLICA_TTL``, not on every request).
_beats: dict[str, float] = {}
BEAT_SECONDS = 1.0


def _stamps_fresh(stamps: Sequence[Any], now: float) -> bool:
    """The rule of ``kv_index.parse_lookup``: every worker's stamp present and recent."""
    return bool(stamps) and all(
        stamp is not None and now - float(stamp) <= kv_index.STALE_SECONDS for stamp in stamps
    )


def _lookup(names: list[str], hashes: list[int]):
    def queue(pipe: Any) -> None:
        kv_index.queue_lookup(pipe, workers=names, hashes=hashes)

    return queue


def _stamps(names: list[str]):
    def queue(pipe: Any) -> None:
        pipe.hmget(kv_index.LIVE_KEY, names)

    return queue


async def _read(
    client: Any, *, names: list[str], replica: str, queue: Any = None
) -> tuple[dict[str, int], list[Any]]:
    """One pipeline: the fleet's in-flight counts (dead replicas' fields deleted), this
    replica's beat when due, and whatever ``queue`` adds; returns the counts and the
    replies of ``queue``'s commands."""
    now = time.time()
    pipe = client.pipeline(transaction=False)
    load_state.queue_read(pipe)
    beat = now - _beats.get(replica, 0.0) >= BEAT_SECONDS
    if beat:
        pipe.hset(load_state.BEAT_KEY, replica, str(now))
    if queue is not None:
        queue(pipe)
    results = await pipe.execute()
    if beat:
        if len(_beats) > 1000:
            _beats.clear()
        _beats[replica] = now
    fleet, dead = load_state.parse_read(results[0], results[1], now=now, workers=names)
    if dead:
        pipe = client.pipeline(transaction=False)
        pipe.hdel(load_state.INFLIGHT_KEY, *dead)
        await pipe.execute()
    return fleet, results[3 if beat else 2 :]


#: How old a shared read of the fleet's counts may be when a request reuses it.
FLEET_READ_SECONDS = 0.02
_shared: dict[tuple, tuple[Any, float, asyncio.Task]] = {}


async def _read_shared(
    client: Any, *, names: list[str], replica: str, stamps: bool
) -> tuple[dict[str, int], list[Any]]:
    """:func:`_read` of the fleet's counts (and the index's liveness stamps), shared:
    requests routed while one is on its way, or within ``FLEET_READ_SECONDS`` of its
    answer, use that answer (other replicas' counts that much older; this replica's own
    are always exact). Its own task, so a caller that goes away does not cancel it for
    the others."""
    key = (id(client), tuple(names), replica, stamps)
    entry = _shared.get(key)
    now = time.monotonic()
    if entry is not None and entry[0] is client:  # the same client: not a reused id
        task = entry[2]
        reusable = not task.cancelled() and now - entry[1] < FLEET_READ_SECONDS
        if not task.done() or (reusable and task.exception() is None):
            return await asyncio.shield(task)
    if len(_shared) > 1000:
        _shared.clear()
    task = asyncio.get_running_loop().create_task(
        _read(client, names=names, replica=replica, queue=_stamps(names) if stamps else None)
    )
    _shared[key] = (client, now, task)
    return await asyncio.shield(task)


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

    One Redis pipeline reads the KV index for the prompt's block hashes (or, while the
    index was stale at the last look, only its liveness stamps), the fleet's in-flight
    counts, and stamps this replica's liveness (at most every ``BEAT_SECONDS``). Any
    Redis failure degrades to the approximate mode with this replica's own counts;
    routing never fails a request.
    """
    started = time.perf_counter()
    block_size = workers[0].block_size
    chain = prefix_chain(text, salt=salt, block_size=block_size)
    names = [w.name for w in workers]
    enabled = _index_enabled()
    looked_fresh = enabled and _index_fresh.get(tuple(names), True)

    def hashed() -> list[int] | None:
        return request_block_hashes(
            body, kind=kind, engine=workers[0].engine, salt=salt, block_size=block_size
        )

    hashes = hashed() if looked_fresh else None
    load = dict(inflight)
    depths: dict[str, int] | None = None
    reason = ""
    if not enabled:
        reason = "disabled"
    elif looked_fresh and hashes is None:
        reason = "no_tokenizer"
    client = fleet_client()
    if client is None:
        reason = reason or "no_redis"
    else:
        now = time.time()
        try:
            if hashes is not None:  # this prompt's lookup rides along: a read of its own
                fleet, results = await _read(
                    client, names=names, replica=replica, queue=_lookup(names, hashes)
                )
            else:  # the same read for every request now: concurrent ones share it
                stamps = enabled and not looked_fresh
                fleet, results = await _read_shared(
                    client, names=names, replica=replica, stamps=stamps
                )
            # This replica's own counts are exact and newer than what it published.
            load = {n: max(fleet.get(n, 0), inflight.get(n, 0)) for n in names}
            fresh = False
            if hashes is not None:
                depths, fresh = kv_index.parse_lookup(
                    results, workers=names, hashes=hashes, now=now
                )
            elif enabled and not looked_fresh and _stamps_fresh(results[0], now):
                # The index turned fresh since the last look: hash and look up now.
                hashes = hashed()
                if hashes is not None:
                    depths, fresh = await kv_index.kv_lookup(client, workers=names, hashes=hashes)
                else:
                    reason = "no_tokenizer"
            if enabled and reason != "no_tokenizer":
                if len(_index_fresh) > 1000:
                    _index_fresh.clear()
                _index_fresh[tuple(names)] = fresh
                if not fresh:
                    depths, reason = None, "stale_index"
        except Exception:
            logger.warning("routing lookup failed; approximate routing", exc_info=True)
            depths, reason = None, "redis_down"
    if depths is not None:
        decision = _exact(
            hashes=hashes or [],
            depths=depths,
            workers=workers,
            load=load,
            session=session,
            tenant_id=tenant_id,
            text=text,
            block_size=block_size,
        )
        decision.chain = chain
        if decision.candidates:
            pending_index.record(hashes or [], decision.candidates[0].name, time.time())
        mode, reason = "exact", "fresh"
    else:
        decision = _approximate(
            chain=chain,
            workers=workers,
            load=load,
            session=session,
            tenant_id=tenant_id,
            text=text,
            approx_index=approx_index,
            block_size=block_size,
        )
        mode = "approximate"
    decision.reason = reason
    ROUTES.labels(mode=mode, reason=reason).inc()
    LOOKUP_SECONDS.labels(mode=mode).observe(time.perf_counter() - started)
    return decision


def _exact(
    *,
    hashes: list[int],
    depths: dict[str, int],
    workers: Sequence[WorkerView],
    load: dict[str, int],
    session: str | None,
    tenant_id: str,
    text: str,
    block_size: int,
) -> RouteDecision:
    now = time.time()
    scored = {
        w.name: max(depths.get(w.name, 0), pending_index.depth(hashes, w.name, now))
        for w in workers
    }
    # A new prefix lands by rendezvous on its first block (``KEY_BLOCK``), salted: one
    # tenant's prompts start on one worker and spill to the next under load. (Keying on a
    # deeper block, to spread a tenant's documents, measured worse: 0.86 vs 0.92 x oracle.)
    key = (
        f"s:{tenant_id}:{session}"
        if session
        else (
            str(hashes[min(len(hashes), KEY_BLOCK) - 1]) if hashes else f"{tenant_id}:{text[:256]}"
        )
    )
    # Holders ranked by how much they hold; equal depths keep rendezvous order, so every
    # replica breaks ties the same way.
    ranked = rendezvous_order(key, workers)
    holders = [w.name for w in sorted(ranked, key=lambda w: -scored[w.name]) if scored[w.name]]
    best = max(scored.values(), default=0)
    if hashes and best < MATCH_THRESHOLD * len(hashes):
        # Mostly new to every worker (a new document behind a known system prompt): it
        # pays its prefill wherever it goes, so it goes where the load is lowest (deepest
        # partial holder first among equals). New content thus spreads over the pool
        # instead of piling onto one tenant's worker and spilling later, mid-session.
        cool = [w for w in ranked if w.kv_usage < PRESSURE] or list(ranked)
        candidates = sorted(cool, key=lambda w: (load.get(w.name, 0), -scored[w.name]))
        candidates += [w for w in ranked if w not in candidates]
    else:
        # Known holders may run hotter than the approximate mode allows: the index says the
        # blocks are really there, and a hit is cheap, while a spill pays a full prefill.
        candidates = order_candidates(
            key=key, workers=workers, inflight=load, preferred=holders, epsilon=EXACT_EPSILON
        )
    routed = scored.get(candidates[0].name, 0) if candidates else 0
    return RouteDecision(
        candidates=candidates,
        mode="exact",
        reason="fresh",
        available_tokens=best * block_size,
        routed_tokens=routed * block_size,
        holders=tuple(holders),
    )


def _approximate(
    *,
    chain: list[str],
    workers: Sequence[WorkerView],
    load: dict[str, int],
    session: str | None,
    tenant_id: str,
    text: str,
    approx_index: PrefixIndex,
    block_size: int,
) -> RouteDecision:
    preferred, depth = approx_index.holders(chain)
    key = (
        f"s:{tenant_id}:{session}"
        if session
        else (chain[0] if chain else f"{tenant_id}:{text[:256]}")
    )
    candidates = order_candidates(key=key, workers=workers, inflight=load, preferred=preferred)
    available = depth * block_size
    routed = available if preferred and candidates and candidates[0].name in preferred else 0
    return RouteDecision(
        candidates=candidates,
        mode="approximate",
        reason="",
        available_tokens=available,
        routed_tokens=routed,
        chain=chain,
        holders=tuple(preferred),
    )
