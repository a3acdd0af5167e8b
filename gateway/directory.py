"""What the gateway knows about workers and caches, refreshed off the request path.

A snapshot of the worker registry (and of each worker's last scraped KV usage) is
reloaded at most every ``REFRESH_SECONDS``, by one request at a time; cache objects named
by requests are cached per (tenant, name-or-id) for the same bound. In-flight counts per
worker are kept here for bounded-load routing: exact for this replica, and published to
Redis (``workers.load_state``) so every replica bounds the load of the whole fleet.
"""

from __future__ import annotations

import asyncio
import enum
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from cachetools import TTLCache

from controlplane.db import db_sync_to_async
from workers.request_hashing import HashSpec

if TYPE_CHECKING:
    from caches.providers.vertex import VertexScope

REFRESH_SECONDS = 2.0
#: How long a sent request's +1 may wait for a closing round trip to carry it (its routing
#: reservation counts it meanwhile); a finished request's -1 rides on its own closing.
LOAD_PUBLISH_SECONDS = 0.005


class _Missing(enum.Enum):
    """A cache miss (a cached None means "no such cache"); an enum so `is` narrows."""

    MISSING = enum.auto()


_MISSING = _Missing.MISSING


@dataclass(frozen=True)
class WorkerView:
    name: str
    base_url: str
    model: str
    pool: str
    block_size: int
    kv_usage: float
    engine: str = "reference"
    # How its prompts are hashed for event-exact routing (workers.hash_config); None with
    # the reason when that cannot be reproduced here (routed approximately).
    hash_spec: HashSpec | None = HashSpec(tokenizer="reference", block_size=16)
    hash_reason: str = ""
    api_key: str | None = field(default=None, repr=False)  # the worker's --api-key


@dataclass(frozen=True)
class CacheView:
    """A live cache as the gateway uses it (never another tenant's)."""

    id: str
    name: str
    provider: str
    model: str
    state: str
    remote_name: str
    prefix_message: dict[str, Any] | None
    placement: tuple[str, ...]
    replication_factor: int
    routing_key: str
    vertex_scope: VertexScope | None = None  # for Vertex caches


@dataclass
class Directory:
    workers: list[WorkerView] = field(default_factory=list)
    loaded_at: float = 0.0
    inflight: dict[str, int] = field(default_factory=dict)
    _refreshing: asyncio.Lock | None = None
    # Event loop only. (tenant, name or id) → the live cache (None: no such cache), and
    # tenant → its Vertex scope, each for REFRESH_SECONDS, least recently used out first.
    _caches: TTLCache[tuple[str, str], CacheView | None] = field(
        default_factory=lambda: TTLCache(maxsize=50_000, ttl=REFRESH_SECONDS)
    )
    _scopes: TTLCache[str, VertexScope] = field(
        default_factory=lambda: TTLCache(maxsize=10_000, ttl=REFRESH_SECONDS)
    )
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # This process's name in the fleet's load state (pod name in Kubernetes).
    replica: str = field(
        default_factory=lambda: (
            f"{os.environ.get('HOSTNAME', 'gw')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
    )
    # worker → [net change, requests sent] not yet in the fleet's load state.
    _unpublished: dict[str, list[int]] = field(default_factory=dict)
    _publisher: asyncio.Task[None] | None = None

    async def current_workers(self) -> list[WorkerView]:
        if time.monotonic() - self.loaded_at < REFRESH_SECONDS:
            return self.workers
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        if self._refreshing.locked() and self.loaded_at:
            return self.workers  # someone else is reloading; use the last snapshot
        async with self._refreshing:
            # Without any snapshot yet (a cold start), wait for the first load rather
            # than answer from an empty list (that would be a spurious model_not_found).
            if time.monotonic() - self.loaded_at >= REFRESH_SECONDS:
                self.workers = await db_sync_to_async(_load_workers)()
                self.loaded_at = time.monotonic()
        return self.workers

    def serving(self, model: str) -> list[WorkerView]:
        return [w for w in self.workers if w.model == model]

    def acquire(self, worker: str) -> None:
        with self._lock:
            self.inflight[worker] = self.inflight.get(worker, 0) + 1
        self._publish(worker, +1)

    def release(self, worker: str) -> None:
        with self._lock:
            self.inflight[worker] = max(0, self.inflight.get(worker, 0) - 1)
        self._publish(worker, -1)

    def _publish(self, worker: str, delta: int) -> None:
        """Mirror a local change into the fleet's load state, off the request path.

        Coalesced: pending changes ride on the next closing round trip of any request of
        this replica (``gateway.closing``), which follows every ``-1`` at once, so no
        replica goes on counting a finished request. A ``+1`` of a long request that no
        closing picks up waits ``LOAD_PUBLISH_SECONDS`` at most; its routing reservation
        counts it meanwhile. A request sent and done in between is one write that nets
        to 0 and still drops its reservation. Fire and forget: an unreachable Redis only
        means the other replicas see this one's load late (routing then reads local
        counts; see ``gateway.routing``).
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        with self._lock:
            change = self._unpublished.setdefault(worker, [0, 0])
            change[0] += delta
            change[1] += int(delta > 0)
        if self._publisher is None or self._publisher.done():
            # The reference kept here is what keeps the task alive until it ends.
            self._publisher = loop.create_task(self._publish_loads())

    def take_unpublished(self) -> dict[str, list[int]]:
        """The load changes not yet in the fleet's state (worker -> [delta, sent]), for
        a caller that writes them now (``gateway.closing``)."""
        with self._lock:
            changes, self._unpublished = self._unpublished, {}
        return changes

    async def loads_published(self) -> None:
        """Write the pending load changes now (shutdown, tests)."""
        from gateway.routing import publish_loads

        await publish_loads(replica=self.replica, changes=self.take_unpublished())

    async def _publish_loads(self) -> None:
        """The fallback writer: what no closing took within the window."""
        from gateway.routing import publish_loads

        while True:
            await asyncio.sleep(LOAD_PUBLISH_SECONDS)  # the coalescing window, not work
            changes = self.take_unpublished()
            if not changes:
                return
            await publish_loads(replica=self.replica, changes=changes)

    async def cache(self, tenant_id: str, reference: str) -> CacheView | None:
        key = (tenant_id, reference)
        cached: CacheView | None | Literal[_Missing.MISSING] = self._caches.get(key, _MISSING)
        if cached is not _MISSING:
            return cached
        view = await db_sync_to_async(_load_cache)(tenant_id, reference)
        self._caches[key] = view
        return view

    async def tenant_vertex_scope(self, tenant_id: str) -> VertexScope:
        """The tenant's Vertex project/location/credentials, cached like caches are."""
        cached_scope: VertexScope | Literal[_Missing.MISSING] = self._scopes.get(
            tenant_id, _MISSING
        )
        if cached_scope is not _MISSING:
            return cached_scope
        from caches.providers.registry import vertex_scope_for_tenant

        scope = await db_sync_to_async(vertex_scope_for_tenant)(tenant_id)
        self._scopes[tenant_id] = scope
        return scope

    def forget(self) -> None:
        self.loaded_at = 0.0
        self._caches.clear()
        self._scopes.clear()


def _load_workers() -> list[WorkerView]:
    from workers.hash_config import worker_hash_spec
    from workers.kv_pressure import kv_pressure_of
    from workers.models import Worker, WorkerState
    from workers.secrets import unseal

    views = []
    for w in Worker.objects.filter(state=WorkerState.HEALTHY).order_by("name"):
        spec, reason = worker_hash_spec(w)
        views.append(
            WorkerView(
                name=w.name,
                base_url=w.base_url.rstrip("/"),
                model=w.model,
                pool=w.pool,
                block_size=w.block_size or 16,
                kv_usage=kv_pressure_of(w.metrics or {}) or 0.0,
                engine=w.engine,
                hash_spec=spec,
                hash_reason=reason,
                api_key=unseal(w.api_key_sealed),
            )
        )
    return views


def _load_cache(tenant_id: str, reference: str) -> CacheView | None:
    import uuid

    from caches.models import LIVE_STATES, CacheObject, Provider
    from caches.providers.registry import vertex_scope_for_cache
    from caches.providers.vllm import placement_key, prefix_message

    live = CacheObject.objects.filter(tenant_id=tenant_id, state__in=LIVE_STATES)
    try:
        cache = live.filter(pk=uuid.UUID(reference)).first()
    except ValueError:
        cache = live.filter(name=reference).first()
    if cache is None:
        return None
    return CacheView(
        id=str(cache.pk),
        name=cache.name,
        provider=cache.provider,
        model=cache.model,
        state=cache.state,
        remote_name=cache.remote_name,
        prefix_message=prefix_message(cache) if cache.provider == Provider.VLLM else None,
        placement=tuple(cache.placement),
        replication_factor=cache.replication_factor,
        routing_key=placement_key(cache),
        vertex_scope=vertex_scope_for_cache(cache) if cache.provider == Provider.VERTEX else None,
    )


directory = Directory()
