"""The fleet's KV-event index in Redis: which worker holds which salted block hash.

Design (see README "Running at scale"): one small indexer process
(:mod:`workers.kv_indexer`) subscribes to every worker's vLLM KV-event stream and writes
this index; every gateway replica reads it with one pipelined Redis round trip per request
(:func:`kv_lookup`). Redis is already in every deployment (Celery, Channels, budgets), so
the index adds no new service the replicas must discover, and any number of replicas see
the same state.

Keys (all under ``cp:kv:``):

- ``cp:kv:w:<worker>``: HASH, event block hash (decimal int, as vLLM sends it) -> how many
  copies the worker holds. vLLM may cache identical blocks twice (no dedup), so a
  ``BlockRemoved`` decrements and the field goes only at zero.
- ``cp:kv:live``: HASH, worker -> unix time the indexer last confirmed its stream in sync.
  A worker whose entry is older than :data:`STALE_SECONDS` (or missing) is not trusted:
  the gateway routes on its character-based guess instead.
- ``cp:kv:p:<worker>``: HASH, block hash -> unix time until which it counts as held: the
  *pending placements*. The routing decision that sends a prompt to a worker claims the
  blocks the worker does not hold yet, so every replica sees the routing intent at once,
  long before the worker has prefilled and its ``BlockStored`` arrives (which deletes the
  claim: the index has it then). A claim whose request never ran expires after
  :data:`PENDING_SECONDS`; the whole hash expires when traffic stops.

The hot path is one script (:data:`ROUTE_LUA`, one round trip, atomic): it reads the
index's freshness, per worker the blocks held and held-or-claimed (the longest consecutive
run from block 0, counted inside Redis, so the reply is a few integers a worker instead
of one per block) and the fleet's in-flight counts (``workers.load_state``), makes the
exact-mode decision, and records it (the claim and a load reservation) before any other
replica's lookup can run.

Dropping a worker (it left the registry, failed a probe, restarted, or its stream lost
events the replay could not fill) is one ``DEL`` + ``HDEL``: it disappears at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

PREFIX = "cp:kv:"
LIVE_KEY = PREFIX + "live"
STALE_SECONDS = 5.0
PENDING_SECONDS = 5.0  # a claim outlives any prefill; BlockStored normally removes it first

# The hot path's one round trip: read, decide, and record the decision, atomically (Redis
# runs a script alone), so two replicas routing the same new prefix at the same moment
# see each other's choice. KEYS: live, beat, inflight. ARGV:
#  1 now, 2 stale seconds, 3 replica TTL, 4 this replica, 5 the prefix of worker keys,
#  6 workers in rendezvous order for this request's key (space-separated), 7 its block
#  hashes (space-separated), 8 the prefix of reservation keys, 9 this replica's own
#  in-flight count per worker, 10 per worker 1 if below the KV pressure threshold,
#  11 match threshold, 12 epsilon, 13 claim expiry, 14 key TTL seconds, 15 reservation
#  expiry, 16 reservation member, 17 "1" to decide (else read only).
# Returns {fresh, per worker: held, held or claimed, in flight + reserved; then, if it
# decided, the failover order as 1-based positions in ARGV[6]}. The decision is
# gateway.routing's exact policy (documented there). Worker keys are built from ARGV,
# so this is for one Redis, not Redis Cluster.
ROUTE_LUA = """
local now = tonumber(ARGV[1])
local workers, hashes, mine, cool = {}, {}, {}, {}
for w in string.gmatch(ARGV[6], '%S+') do workers[#workers + 1] = w end
for h in string.gmatch(ARGV[7], '%S+') do hashes[#hashes + 1] = h end
for x in string.gmatch(ARGV[9], '%S+') do mine[#mine + 1] = tonumber(x) end
for x in string.gmatch(ARGV[10], '%S+') do cool[#cool + 1] = (x == '1') end
local n = #workers
local fresh = 1
if n == 0 then fresh = 0 else
  local stamps = redis.call('HMGET', KEYS[1], unpack(workers))
  for i = 1, n do
    if not stamps[i] or now - tonumber(stamps[i]) > tonumber(ARGV[2]) then fresh = 0 end
  end
end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[1])
local live = {}
local beats = redis.call('HGETALL', KEYS[2])
for i = 1, #beats, 2 do
  if now - tonumber(beats[i + 1]) <= tonumber(ARGV[3]) then live[beats[i]] = true end
end
local fleet = {}
local inflight = redis.call('HGETALL', KEYS[3])
for i = 1, #inflight, 2 do
  local f = inflight[i]
  local sep = string.find(f, '|', 1, true)
  if sep and live[string.sub(f, 1, sep - 1)] then
    local w = string.sub(f, sep + 1)
    local c = tonumber(inflight[i + 1]) or 0
    if c > 0 then fleet[w] = (fleet[w] or 0) + c end
  else
    redis.call('HDEL', KEYS[3], f)  -- a dead replica's counts stop counting
  end
end
local out = {fresh}
local held, score, load = {}, {}, {}
local best, total, anycool = 0, 0, false
for i, w in ipairs(workers) do
  local key, pkey, rkey = ARGV[5] .. 'w:' .. w, ARGV[5] .. 'p:' .. w, ARGV[8] .. w
  -- One HMGET per key (a C loop) instead of a call per block, and none at all where
  -- the first block that matters is absent (most workers, for most prompts).
  local h, c, got = 0, 0, {}
  if #hashes > 0 and redis.call('HEXISTS', key, hashes[1]) == 1 then
    got = redis.call('HMGET', key, unpack(hashes))
    while h < #hashes and got[h + 1] do h = h + 1 end
  end
  c = h
  if c < #hashes and redis.call('HEXISTS', pkey, hashes[h + 1]) == 1 then
    local till = redis.call('HMGET', pkey, unpack(hashes, h + 1))
    while c < #hashes do
      if not got[c + 1] then
        local t = till[c + 1 - h]
        if not t or tonumber(t) < now then break end
      end
      c = c + 1
    end
  end
  redis.call('ZREMRANGEBYSCORE', rkey, '-inf', now)
  local l = (fleet[w] or 0) + redis.call('ZCARD', rkey)
  held[i], score[i] = h, c
  load[i] = math.max(l, mine[i] or 0)  -- this replica's own count is newer
  best = math.max(best, c)
  total = total + load[i]
  if cool[i] then anycool = true end
  out[#out + 1] = h
  out[#out + 1] = c
  out[#out + 1] = l
end
if fresh == 0 or ARGV[17] ~= '1' then return out end
local function usable(i) return cool[i] or not anycool end
local order, rest = {}, {}
if #hashes > 0 and best < tonumber(ARGV[11]) * #hashes then
  for i = 1, n do
    if usable(i) then order[#order + 1] = i else rest[#rest + 1] = i end
  end
  table.sort(order, function(a, b)
    if load[a] ~= load[b] then return load[a] < load[b] end
    if score[a] ~= score[b] then return score[a] > score[b] end
    return a < b
  end)
else
  local ranked = {}
  for i = 1, n do ranked[i] = i end
  table.sort(ranked, function(a, b)
    if score[a] ~= score[b] then return score[a] > score[b] end
    return a < b
  end)
  local bound = math.ceil((1 + tonumber(ARGV[12])) * (total + 1) / n)
  for _, i in ipairs(ranked) do
    if usable(i) and load[i] + 1 <= bound then order[#order + 1] = i
    else rest[#rest + 1] = i end
  end
end
for _, i in ipairs(rest) do order[#order + 1] = i end
local chosen = order[1]
local w = workers[chosen]
local args = {}
for j = held[chosen] + 1, #hashes do
  args[#args + 1] = hashes[j]
  args[#args + 1] = ARGV[13]
end
if #args > 0 then
  redis.call('HSET', ARGV[5] .. 'p:' .. w, unpack(args))
  redis.call('EXPIRE', ARGV[5] .. 'p:' .. w, ARGV[14])
end
redis.call('ZADD', ARGV[8] .. w, ARGV[15], ARGV[16])
redis.call('EXPIRE', ARGV[8] .. w, ARGV[14])
for _, i in ipairs(order) do out[#out + 1] = i end
return out
"""

# KEYS: a pending hash. ARGV: now. Deletes claims that expired.
PRUNE_LUA = """
local all = redis.call('HGETALL', KEYS[1])
local gone = 0
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) < tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], all[i])
    gone = gone + 1
  end
end
return gone
"""

# Decrement one copy of each hash, deleting fields that reach zero (atomic per call).
_REMOVE_LUA = """
for i, h in ipairs(ARGV) do
  local left = redis.call('HINCRBY', KEYS[1], h, -1)
  if left <= 0 then redis.call('HDEL', KEYS[1], h) end
end
return 0
"""


def worker_key(worker: str) -> str:
    return f"{PREFIX}w:{worker}"


def pending_key(worker: str) -> str:
    return f"{PREFIX}p:{worker}"


def apply_events(
    client: Any,
    *,
    worker: str,
    events: Iterable[dict[str, Any]],
    mediums: tuple[str | None, ...] = ("GPU", None),
) -> int:
    """Apply decoded KV events (``workers.engine.kv_events.decode_batch`` dicts) for ``worker``.

    One pipeline per call; events apply in order, so an ``AllBlocksCleared`` followed by
    ``BlockStored`` in the same batch leaves the stored blocks. Blocks on tiers other than
    ``mediums`` (CPU/disk offload) are ignored: a GPU hit is what prefill skips. Returns
    the number of events applied.
    """
    key, pending = worker_key(worker), pending_key(worker)
    pipe = client.pipeline(transaction=False)
    applied = 0
    for event in events:
        kind = event.get("type")
        if kind == "BlockStored" and event.get("medium") in mediums:
            stored = [_field(h) for h in event.get("block_hashes") or ()]
            for h in stored:
                pipe.hincrby(key, h, 1)
            if stored:  # the claim is now a fact: the index answers for these blocks
                pipe.hdel(pending, *stored)
        elif kind == "BlockRemoved" and event.get("medium") in mediums:
            hashes = [_field(h) for h in event.get("block_hashes") or ()]
            if hashes:
                pipe.eval(_REMOVE_LUA, 1, key, *hashes)
        elif kind == "AllBlocksCleared":
            pipe.delete(key)
        else:
            continue
        applied += 1
    pipe.execute()
    return applied


def mark_live(client: Any, *, workers: Sequence[str], now: float | None = None) -> None:
    """Record that the indexer's streams for ``workers`` are in sync as of ``now``."""
    if workers:
        stamp = str(now if now is not None else time.time())
        client.hset(LIVE_KEY, mapping=dict.fromkeys(workers, stamp))


def drop_worker(client: Any, *, worker: str) -> None:
    """Forget everything about ``worker``: its blocks and its liveness (at once)."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(worker_key(worker), pending_key(worker))
    pipe.hdel(LIVE_KEY, worker)
    pipe.execute()


def prune_pending(client: Any, *, workers: Sequence[str], now: float | None = None) -> int:
    """Delete expired claims (requests that were routed but never ran); the indexer's job."""
    stamp = now if now is not None else time.time()
    return sum(int(client.eval(PRUNE_LUA, 1, pending_key(w), str(stamp)) or 0) for w in workers)


def route_args(
    *,
    workers: Sequence[str],
    hashes: Sequence[int],
    replica: str,
    now: float,
    replica_ttl: float,
    mine: Sequence[int] = (),
    cool: Sequence[bool] = (),
    threshold: float = 0.0,
    epsilon: float = 0.0,
    member: str = "",
    decide: bool = False,
) -> tuple[list[str], list[str]]:
    """``(keys, args)`` of one :data:`ROUTE_LUA` call (``decide``: also choose and claim)."""
    from workers import load_state

    keys = [LIVE_KEY, load_state.BEAT_KEY, load_state.INFLIGHT_KEY]
    args = [
        f"{now:.6f}",
        str(STALE_SECONDS),
        str(replica_ttl),
        replica,
        PREFIX,
        " ".join(workers),
        " ".join(map(str, hashes)),
        load_state.RESERVED_PREFIX,
        " ".join(map(str, mine)) if mine else " ".join("0" for _ in workers),
        " ".join("1" if c else "0" for c in cool) if cool else " ".join("1" for _ in workers),
        repr(threshold),
        repr(epsilon),
        f"{now + PENDING_SECONDS:.3f}",
        str(int(PENDING_SECONDS * 4)),
        f"{now + load_state.RESERVE_SECONDS:.3f}",
        member or "-",
        "1" if decide else "0",
    ]
    return keys, args


def parse_route(
    reply: Sequence[Any], *, workers: Sequence[str]
) -> tuple[bool, dict[str, int], dict[str, int], dict[str, int], list[int]]:
    """``(fresh, held, held or claimed, in flight, order)`` from a :data:`ROUTE_LUA` reply;
    ``order``: the failover order as 0-based positions in ``workers`` (empty if it did
    not decide)."""
    held, claimed, load = {}, {}, {}
    for i, worker in enumerate(workers):
        base = 1 + 3 * i
        held[worker] = int(reply[base])
        claimed[worker] = int(reply[base + 1])
        load[worker] = int(reply[base + 2])
    order = [int(x) - 1 for x in reply[1 + 3 * len(workers) :]]
    return bool(int(reply[0])), held, claimed, load, order


def worker_forget(worker: str) -> None:
    """Hook for the registry: a worker that was removed or went unhealthy leaves the index.

    Best effort (Redis down means the index is stale anyway, and the gateway then falls
    back to approximate routing once ``cp:kv:live`` ages out).
    """
    from controlplane.ops import redis_client

    try:
        drop_worker(redis_client(), worker=worker)
    except Exception:  # a hook must never fail the registry write
        return


def _field(block_hash: int | bytes) -> str:
    # With VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 vLLM sends raw digests; keep the same
    # low-64-bit int form the default mode sends, so one request hash matches both.
    if isinstance(block_hash, bytes | bytearray):
        return str(int.from_bytes(bytes(block_hash)[-8:], "big"))
    return str(block_hash)


def queue_lookup(pipe: Any, *, workers: Sequence[str], hashes: Sequence[int]) -> None:
    """Queue the commands of one lookup on ``pipe`` (so callers can batch other reads)."""
    pipe.hmget(LIVE_KEY, list(workers))
    fields = [str(h) for h in hashes]
    for worker in workers:
        if fields:
            pipe.hmget(worker_key(worker), fields)
        else:
            pipe.exists(worker_key(worker))


def parse_lookup(
    results: Sequence[Any], *, workers: Sequence[str], hashes: Sequence[int], now: float
) -> tuple[dict[str, int], bool]:
    """``(matched blocks per worker, all fresh)`` from the replies :func:`queue_lookup` queued.

    The match is the longest *consecutive* run from block 0: attention is causal, so a
    block after a miss cannot be reused even if the worker holds it.
    """
    live = results[0]
    fresh = all(
        stamp is not None and now - float(stamp) <= STALE_SECONDS for stamp in live
    ) and bool(workers)
    depths: dict[str, int] = {}
    for worker, reply in zip(workers, results[1:], strict=True):
        depth = 0
        if hashes:
            for count in reply:
                if count is None or int(count) <= 0:
                    break
                depth += 1
        depths[worker] = depth
    return depths, fresh


async def kv_lookup(
    client: Any, *, workers: Sequence[str], hashes: Sequence[int]
) -> tuple[dict[str, int], bool]:
    """Matched prefix blocks per worker and whether the index is fresh for all of them.

    ``client`` is a ``redis.asyncio`` client; one pipelined round trip.
    """
    pipe = client.pipeline(transaction=False)
    queue_lookup(pipe, workers=workers, hashes=hashes)
    results = await pipe.execute()
    return parse_lookup(results, workers=workers, hashes=hashes, now=time.time())
