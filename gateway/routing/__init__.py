"""Choosing a worker: prefix-affine, load-bounded, memory-aware, with failover order.

1. A request naming a cache goes to the workers the cache was warmed on (rendezvous
   order of its routing key — the same order the warmer used).
2. Otherwise :func:`route_request` (the one call the gateway's route step makes) decides
   *event-exact* (:mod:`gateway.routing.exact`) when the KV indexer keeps the fleet's
   index fresh in Redis: every worker is scored by the blocks it really holds, and one
   Redis script decides under two fleet-wide load bounds (in flight, and each worker's
   share of recent requests) and records the decision atomically, so every replica
   routes as one.
3. Whenever the index is stale, Redis is unreachable or the engine's tokenizer is unknown
   here, it falls back to the *approximate* mode (:mod:`gateway.routing.approximate`): a
   per-process prefix index guessed from characters, under the same kind of bounded load.
The result is an ordered list: the gateway fails over to the next on connection errors.

Modules: ``approximate`` (the character-based index and its bounded-load order),
``exact`` (the event-exact decision), ``fleet`` (what a replica keeps per process for the
shared state: Redis clients, the script, its reservations), ``decision`` (the result).
"""

from gateway.routing.approximate import (
    CHARS_PER_TOKEN,
    EPSILON,
    HOLDERS,
    MAX_CHAIN_BLOCKS,
    PRESSURE,
    PrefixIndex,
    order_candidates,
    pool_under_pressure,
    prefix_chain,
)
from gateway.routing.decision import RouteDecision
from gateway.routing.exact import (
    BALANCE,
    EXACT_EPSILON,
    LOAD_WEIGHT,
    LOOKUP_SECONDS,
    ROUTES,
    route_request,
)
from gateway.routing.fleet import (
    fleet_client,
    forget_local_state,
    publish_loads,
    queue_loads,
)

__all__ = [
    "BALANCE",
    "CHARS_PER_TOKEN",
    "EPSILON",
    "EXACT_EPSILON",
    "HOLDERS",
    "LOAD_WEIGHT",
    "LOOKUP_SECONDS",
    "MAX_CHAIN_BLOCKS",
    "PRESSURE",
    "ROUTES",
    "PrefixIndex",
    "RouteDecision",
    "fleet_client",
    "forget_local_state",
    "order_candidates",
    "pool_under_pressure",
    "prefix_chain",
    "publish_loads",
    "queue_loads",
    "route_request",
]
