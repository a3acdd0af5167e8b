"""The routing script (``kv_route.lua``), the KV index's own scripts, typed.

The hot path's one Redis round trip: read the KV index and the fleet's load, decide, record.

``kv_route.lua`` runs atomically (Redis runs a script alone), so two gateway replicas
routing the same new prefix at the same moment see each other's choice: the decision,
its pending placement (claims on ``cp:kv:p:<worker>``), its load reservation
(``cp:load:r:<worker>``) and the chosen worker's decayed request count
(``cp:load:rate``) are written before any other replica's lookup runs.

The policy (``gateway.routing.exact`` documents why): consistent hashing with bounded
loads on two loads, in flight and the decayed request count, and a score inside the
bound of *share of the prompt cached there* minus ``load_weight`` × relative load.

KEYS: live, beat, inflight, rate, decisions. ARGV:
 1 now, 2 stale seconds, 3 replica TTL, 4 this replica, 5 the prefix of worker keys,
 6 workers in rendezvous order for this request's key (space-separated), 7 its block
 hashes (space-separated), 8 the prefix of reservation keys, 9 this replica's own
 in-flight count per worker, 10 per worker 1 if below the KV pressure threshold,
 11 match threshold, 12 in-flight epsilon, 13 claim expiry, 14 key TTL seconds,
 15 reservation expiry, 16 reservation member, 17 "1" to decide (else read only),
 18 the request-count window (decisions), 19 the balance bound c, 20 the load weight,
 21 the load prior (requests).
Returns {fresh, per worker: held, held or claimed, in flight + reserved; then, if it
decided, the failover order as 1-based positions in ARGV[6]}. Worker keys are built
from ARGV, so this is for one Redis, not Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.redis import keys as redis_keys
from controlplane.redis.scripts import script


@dataclass(frozen=True)
class KvRoute:
    """Arguments of one ``kv_route.lua`` call (``decide``: also choose and claim);
    ``stale_seconds``, ``pending_seconds``, ``reserve_seconds``: the index's and the
    load state's windows (``workers.kv_index``, ``workers.load_state``)."""

    workers: Sequence[str]
    hashes: Sequence[int]
    replica: str
    now: float
    replica_ttl: float
    stale_seconds: float
    pending_seconds: float
    reserve_seconds: float
    mine: Sequence[int] = ()
    cool: Sequence[bool] = ()
    threshold: float = 0.0
    epsilon: float = 0.0
    member: str = ""
    decide: bool = False
    window: float = 1.0
    balance: float = 1.0
    load_weight: float = 1.0
    prior: float = 0.0

    def keys(self) -> list[str]:
        return [
            redis_keys.KV_LIVE,
            redis_keys.LOAD_BEAT,
            redis_keys.LOAD_INFLIGHT,
            redis_keys.LOAD_RATE,
            redis_keys.LOAD_DECISIONS,
        ]

    def args(self) -> list[str]:
        now, workers = self.now, self.workers
        return [
            f"{now:.6f}",
            str(self.stale_seconds),
            str(self.replica_ttl),
            self.replica,
            redis_keys.KV,
            " ".join(workers),
            " ".join(map(str, self.hashes)),
            redis_keys.LOAD_RESERVED,
            " ".join(map(str, self.mine)) if self.mine else " ".join("0" for _ in workers),
            " ".join("1" if c else "0" for c in self.cool)
            if self.cool
            else " ".join("1" for _ in workers),
            repr(self.threshold),
            repr(self.epsilon),
            f"{now + self.pending_seconds:.3f}",
            str(int(self.pending_seconds * 4)),
            f"{now + self.reserve_seconds:.3f}",
            self.member or "-",
            "1" if self.decide else "0",
            repr(self.window),
            repr(self.balance),
            repr(self.load_weight),
            repr(self.prior),
        ]


@dataclass(frozen=True)
class RouteReply:
    """A ``kv_route.lua`` reply: whether the index is fresh; per worker the blocks held,
    held or claimed, and in flight; the failover order (0-based positions in the
    workers; empty when it did not decide)."""

    fresh: bool
    held: dict[str, int]
    claimed: dict[str, int]
    load: dict[str, int]
    order: list[int]

    @classmethod
    def parse(cls, reply: Sequence[Any], *, workers: Sequence[str]) -> RouteReply:
        held, claimed, load = {}, {}, {}
        for i, worker in enumerate(workers):
            base = 1 + 3 * i
            held[worker] = int(reply[base])
            claimed[worker] = int(reply[base + 1])
            load[worker] = int(reply[base + 2])
        order = [int(x) - 1 for x in reply[1 + 3 * len(workers) :]]
        return cls(bool(int(reply[0])), held, claimed, load, order)


async def kv_route(client: Any, call: KvRoute) -> RouteReply:
    """Run ``kv_route.lua`` (one round trip) for ``call``."""
    reply = await script("kv_route").run_async(client, keys=call.keys(), args=call.args())
    return RouteReply.parse(reply, workers=call.workers)


def kv_prune_pending(client: Any, *, worker: str, now: float) -> int:
    """Delete ``worker``'s expired routing claims; returns how many."""
    return int(
        script("kv_prune_pending").run(
            client, keys=[redis_keys.kv_pending(worker)], args=[str(now)]
        )
        or 0
    )


def kv_remove_blocks_queue(pipe: Any, *, worker: str, hashes: Sequence[str]) -> None:
    """Queue the removal of one copy of each of ``hashes`` from ``worker``'s index
    (``EVAL``: the indexer's pipeline cannot re-run one part after a NOSCRIPT)."""
    script("kv_remove_blocks").queue_source(
        pipe, keys=[redis_keys.kv_worker(worker)], args=list(hashes)
    )
