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
is scored by the blocks it *really* holds (consecutive from block 0) or that any replica
has just routed to it (a pending placement, until the worker's ``BlockStored`` arrives).
The same Redis round trip reads the fleet's in-flight counts (``workers.load_state``),
makes the decision inside Redis and records it (claim + load reservation), atomically,
so the load bound is fleet-wide and concurrent replicas agree on where a new prefix
goes. The character-based index above stays the fallback whenever the index is stale,
Redis is unreachable, or the engine's tokenizer is unknown here; the mode of each
decision is counted in ``cacheplane_gateway_route_total{mode}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Histogram

from controlplane.env import env_float
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
# Exact mode's load bound for real holders: 2 x the mean in flight.
# Read with the settings module's typed helper: a malformed value stops the process with
# one line naming the variable (a bare float() would die with a traceback, and a negative
# bound would make every holder "overloaded").
EXACT_EPSILON = env_float("CACHEPLANE_ROUTING_HOLDER_EPSILON", 1.0, minimum=0.0)
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

    def clear(self) -> None:
        """Forget every prefix (a fresh gateway's state)."""
        self._entries.clear()

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


# id(loop) → (loop, client): a finished loop's id can be reused by a new loop, whose
# client must not be the dead loop's (the loop itself is compared, as in hotpath_redis).
_clients: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
#: Workers (sorted names) → whether the KV index was fresh for them at the last look.
_index_fresh: dict[tuple[str, ...], bool] = {}


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
    """The redis.asyncio client of this event loop (one per loop; None without Redis)."""
    url = _redis_url()
    if not url:
        return None
    loop = asyncio.get_running_loop()
    entry = _clients.get(id(loop))
    if entry is None or entry[0] is not loop:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
        if len(_clients) > 16:  # loops of finished test servers
            _clients.clear()
        entry = _clients[id(loop)] = (loop, client)
    return entry[1]


async def publish_load(*, replica: str, worker: str, delta: int, sent: int | None = None) -> None:
    """Add ``delta`` to this replica's in-flight count for ``worker`` in the fleet state;
    ``sent`` requests (default: a positive ``delta``) are counted now, so their routing
    reservations are dropped (a +1 and a -1 coalesced into 0 still sent one)."""
    client = fleet_client()
    if client is None:
        return
    now = time.time()
    count = max(delta, 0) if sent is None else sent
    members = [m for m in (_take_reservation(worker, now) for _ in range(count)) if m]
    try:
        pipe = client.pipeline(transaction=False)
        load_state.queue_add(
            pipe,
            replica=replica,
            worker=worker,
            delta=delta,
            now=now,
            reservation=members[0] if members else "",
        )
        if len(members) > 1:
            pipe.zrem(load_state.reserved_key(worker), *members[1:])
        await pipe.execute()
    except Exception:  # Redis down: others see this replica's load once it is back
        logger.debug("fleet load update failed", exc_info=True)


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

    One Redis script (``workers.kv_index.ROUTE_LUA``, one round trip, atomic) reads the
    index's freshness, per worker the blocks held and held-or-claimed, and the fleet's
    in-flight counts; stamps this replica's liveness; and, when the index is fresh, makes
    the exact decision below and records it: the blocks the chosen worker does not hold
    yet are claimed for it (a pending placement) and one request is reserved on it, so the
    next lookup of any replica already sees both. Any Redis failure degrades to the
    approximate mode with this replica's own counts; routing never fails a request.
    While the index was stale at the pool's last look, the prompt is not tokenized (the
    call only reads); the first request that finds it fresh again hashes and decides.

    The exact decision (scores are blocks held or claimed, consecutive from block 0):
    a prompt mostly new to every worker (best < ``MATCH_THRESHOLD`` of its blocks) goes
    to the least-loaded worker below the KV pressure threshold (deepest partial holder,
    then rendezvous order, among equals): it pays its prefill wherever it goes, so new
    content spreads over the pool instead of piling onto one tenant's worker and spilling
    later, mid-session. Otherwise holders come first by depth (ties in rendezvous order
    of the request's key, the same on every replica), skipping any over the bounded-load
    limit ``⌈(1 + EXACT_EPSILON) × (in flight + 1) / workers⌉`` (a real holder may run
    hotter than a guessed one: a hit is cheap, a spill pays a full prefill).
    """
    started = time.perf_counter()
    block_size = workers[0].block_size
    # Recorded in the approximate index after the answer even in exact mode, so the
    # fallback is warm the moment the event index goes stale.
    chain = prefix_chain(text, salt=salt, block_size=block_size)
    enabled = _index_enabled()
    pool_key = tuple(sorted(w.name for w in workers))
    # While the index was stale at this pool's last look (workers without KV events),
    # requests skip the tokenizing and hashing: the script still reads the index's
    # freshness (and the fleet's load), and the first request that finds it fresh again
    # hashes and decides at once, in a second call.
    hash_now = enabled and _index_fresh.get(pool_key, True)
    client = fleet_client()
    load = dict(inflight)
    decision: RouteDecision | None = None
    reason = ""
    for _attempt in range(2):
        hashes = (
            request_block_hashes(
                body, kind=kind, engine=workers[0].engine, salt=salt, block_size=block_size
            )
            if hash_now
            else None
        )
        # A new prefix lands by rendezvous on its first block (``KEY_BLOCK``), salted: one
        # tenant's prompts start on one worker and spill to the next under load. (Keying
        # on a deeper block, to spread a tenant's documents, measured worse: 0.86 vs 0.92
        # x oracle.)
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
            reason = "no_tokenizer"
        if client is None:
            reason = reason or "no_redis"
            break
        now = time.time()
        member = f"{replica}:{next(_reservation_ids)}"
        try:
            keys, args = kv_index.route_args(
                workers=names,
                hashes=hashes or (),
                replica=replica,
                now=now,
                replica_ttl=load_state.REPLICA_TTL,
                mine=[inflight.get(n, 0) for n in names],
                cool=[w.kv_usage < PRESSURE for w in ranked],
                threshold=MATCH_THRESHOLD,
                epsilon=EXACT_EPSILON,
                member=member,
                decide=hashes is not None,
            )
            reply = await _script(client, kv_index.ROUTE_LUA)(keys=keys, args=args)
            fresh, _held, scored, fleet, order = kv_index.parse_route(reply, workers=names)
        except Exception:
            logger.warning("routing lookup failed; approximate routing", exc_info=True)
            decision, reason = None, "redis_down"
            break
        # This replica's own counts are exact and newer than what it published.
        load = {n: max(fleet.get(n, 0), inflight.get(n, 0)) for n in names}
        if enabled:
            if len(_index_fresh) > 1000:  # pools of finished tests
                _index_fresh.clear()
            _index_fresh[pool_key] = fresh
        if order:
            candidates = [ranked[i] for i in order]
            _remember_reservation(candidates[0].name, now, member)
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
        if enabled and not fresh and reason != "no_tokenizer":
            reason = "stale_index"
        if hash_now or not enabled or not fresh:
            break
        hash_now = True  # the index turned fresh since the last look: hash and decide
    if decision is None:
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
        decision.reason = reason
    ROUTES.labels(mode=decision.mode, reason=decision.reason).inc()
    LOOKUP_SECONDS.labels(mode=decision.mode).observe(time.perf_counter() - started)
    return decision


_scripts: dict[tuple[int, str], Any] = {}


def _script(client: Any, source: str) -> Any:
    """``source`` registered on ``client`` (EVALSHA; loaded again after a Redis restart)."""
    key = (id(client), source)
    script = _scripts.get(key)
    if script is None:
        if len(_scripts) > 64:  # clients of finished event loops (tests)
            _scripts.clear()
        script = _scripts[key] = client.register_script(source)
    return script


# This replica's reservations not yet superseded by its own published count, per worker.
_reserved: dict[str, deque[tuple[float, str]]] = {}
_reservation_ids = itertools.count()


def forget_local_state() -> None:
    """Forget this process's Redis clients and unsent load reservations, as a new process.

    For tests that play several gateway processes in one: everything shared lives in Redis.
    """
    _clients.clear()
    _reserved.clear()
    _index_fresh.clear()


def _remember_reservation(worker: str, now: float, member: str) -> None:
    queue = _reserved.setdefault(worker, deque())
    queue.append((now + load_state.RESERVE_SECONDS, member))
    if len(queue) > 10_000:  # requests refused before sending leave theirs behind
        queue.popleft()


def _take_reservation(worker: str, now: float) -> str:
    """This replica's oldest live reservation on ``worker`` (its request is being sent)."""
    queue = _reserved.get(worker)
    while queue:
        expires, member = queue.popleft()
        if expires > now:
            return member
    return ""


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
