"""What the gateway knows about workers and caches, refreshed off the request path.

A snapshot of the worker registry (and of each worker's last scraped KV usage) is
reloaded at most every ``REFRESH_SECONDS``, by one request at a time; cache objects named
by requests are cached per (tenant, name-or-id) for the same bound. In-flight counts per
worker are kept here for bounded-load routing: exact for this replica, and published to
Redis (``workers.load_state``) so every replica bounds the load of the whole fleet.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async

REFRESH_SECONDS = 2.0
PUBLISH_SECONDS = 0.02  # how late other replicas may see this one's in-flight counts


@dataclass(frozen=True)
class WorkerView:
    name: str
    base_url: str
    model: str
    pool: str
    block_size: int
    kv_usage: float
    engine: str = "reference"  # which tokenizer hashes its prompts (workers.request_hashing)


@dataclass(frozen=True)
class CacheView:
    """A live cache as the gateway uses it (never another tenant's)."""

    id: str
    name: str
    provider: str
    model: str
    state: str
    remote_name: str
    prefix_message: dict | None
    placement: tuple[str, ...]
    replication_factor: int
    routing_key: str
    vertex_scope: object = None  # caches.providers.vertex.VertexScope for Vertex caches


@dataclass
class Directory:
    workers: list[WorkerView] = field(default_factory=list)
    loaded_at: float = 0.0
    inflight: dict[str, int] = field(default_factory=dict)
    _refreshing: asyncio.Lock | None = None
    _caches: dict[tuple[str, str], tuple[float, CacheView | None]] = field(default_factory=dict)
    _scopes: dict[str, tuple[float, object]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # This process's name in the fleet's load state (pod name in Kubernetes).
    replica: str = field(
        default_factory=lambda: (
            f"{os.environ.get('HOSTNAME', 'gw')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
    )
    _deltas: dict[str, int] = field(default_factory=dict)
    _pusher: asyncio.Task | None = None
    _pushed_at: float = 0.0

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
                self.workers = await sync_to_async(_load_workers, thread_sensitive=False)()
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

        Fire and forget, and coalesced: changes go out at most every
        ``PUBLISH_SECONDS``, together (one pipeline, the net delta per worker; requests
        that started and ended in between show as nothing, which is what they are by
        then). Other replicas thus see this one's load at most that late, on top of
        their own exact counts. An unreachable Redis only means they see it later
        (routing then reads local counts; see ``gateway.routing``).
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._deltas[worker] = self._deltas.get(worker, 0) + delta
        pusher = self._pusher
        if pusher is None or pusher.done() or pusher.get_loop() is not loop:
            self._pusher = loop.create_task(self._push())

    async def _push(self) -> None:
        from gateway.routing import publish_loads

        while self._deltas:
            # The coalescing interval (like the usage ticker's), not simulated work.
            await asyncio.sleep(max(0.0, self._pushed_at + PUBLISH_SECONDS - time.monotonic()))
            deltas, self._deltas = self._deltas, {}
            self._pushed_at = time.monotonic()
            changed = {worker: delta for worker, delta in deltas.items() if delta}
            if changed:
                await publish_loads(replica=self.replica, deltas=changed)

    async def cache(self, tenant_id: str, reference: str) -> CacheView | None:
        key = (tenant_id, reference)
        entry = self._caches.get(key)
        if entry is not None and time.monotonic() - entry[0] < REFRESH_SECONDS:
            return entry[1]
        view = await sync_to_async(_load_cache, thread_sensitive=False)(tenant_id, reference)
        if len(self._caches) > 50_000:
            self._caches.clear()
        self._caches[key] = (time.monotonic(), view)
        return view

    async def tenant_vertex_scope(self, tenant_id: str):
        """The tenant's Vertex project/location/credentials, cached like caches are."""
        entry = self._scopes.get(tenant_id)
        if entry is not None and time.monotonic() - entry[0] < REFRESH_SECONDS:
            return entry[1]
        from caches.providers.registry import vertex_scope_for_tenant

        scope = await sync_to_async(vertex_scope_for_tenant, thread_sensitive=False)(tenant_id)
        self._scopes[tenant_id] = (time.monotonic(), scope)
        return scope

    def forget(self) -> None:
        self.loaded_at = 0.0
        self._caches.clear()
        self._scopes.clear()


def _load_workers() -> list[WorkerView]:
    from workers.models import Worker, WorkerState

    return [
        WorkerView(
            name=w.name,
            base_url=w.base_url.rstrip("/"),
            model=w.model,
            pool=w.pool,
            block_size=w.block_size or 16,
            kv_usage=float((w.metrics or {}).get("vllm:kv_cache_usage_perc", 0.0)),
            engine=w.engine,
        )
        for w in Worker.objects.filter(state=WorkerState.HEALTHY).order_by("name")
    ]


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
