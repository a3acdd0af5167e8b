"""The KV indexer: subscribes to every worker's vLLM KV events and keeps the Redis index.

One process per deployment (a second one is harmless: both apply the same events, but the
counts of copies would double, so the Kubernetes Deployment runs exactly one). For each
worker it holds a ZMQ SUB socket on the worker's PUB endpoint and, when the worker has
one, a DEALER on its replay ROUTER. Per worker it tracks the last applied sequence number:

- the first batch seen with ``seq > 0`` (the indexer started after the worker): replay
  from 0 to load what the worker's buffer still holds;
- a gap (``seq > last + 1``): replay from ``last + 1``; if the replay cannot fill it (no
  replay socket, or the buffer no longer reaches back), the worker's index is reset,
  because a lost ``BlockRemoved`` would otherwise leave a phantom hit forever;
- ``seq == 0`` after a higher one, or ``seq <= last`` after a reset: the worker restarted
  (vLLM restarts numbering and loses its cache): reset, then apply;
- duplicates (``seq <= last``, e.g. overlap between replay and live stream) are skipped.

Every ``LIVE_EVERY`` seconds the in-sync workers are stamped in ``cp:kv:live``; the
gateway trusts the index only for workers stamped within ``STALE_SECONDS``. A
``BlockStored`` also deletes the gateways' pending placements of those blocks on that
worker (``cp:kv:p:<worker>``: the event has confirmed them); every ``PRUNE_EVERY``
seconds claims that expired (their request never ran) are deleted.

Workers come from ``--source NAME=PUB[,REPLAY]`` (static, like vllm-router's
``--kv-event-source``) or from the registry (``--from-registry``): healthy workers with a
``kv_events_endpoint`` of the form ``PUB[,REPLAY]``; a wildcard host (``tcp://*:5557``) is
replaced by the host of the worker's ``base_url``. A worker that leaves the registry (or
the healthy state) is dropped from the index on the next refresh (every second).

    python -m workers.kv_indexer --redis redis://... --source w0=tcp://10.0.0.5:5557,tcp://10.0.0.5:5558
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import zmq

from workers import kv_index
from workers.engine.kv_events import END_SEQ, decode_batch
from workers.hash_check import check_first_blocks
from workers.request_hashing import HashSpec

logger = logging.getLogger(__name__)

LIVE_EVERY = 1.0
PRUNE_EVERY = 10.0  # expired pending placements (routed requests that never ran) go
REPLAY_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class Source:
    """Where one worker publishes: its PUB endpoint and optional replay ROUTER, and how it
    hashes (to check its block-0 hashes; None: not checked)."""

    worker: str
    endpoint: str
    replay: str | None = None
    spec: HashSpec | None = None

    @classmethod
    def parse(cls, text: str) -> Source:
        """``NAME=PUB[,REPLAY]``."""
        name, _, endpoints = text.partition("=")
        parts = [p.strip() for p in endpoints.split(",") if p.strip()]
        if not name or not parts:
            raise ValueError(f"expected NAME=PUB[,REPLAY], not {text!r}")
        return cls(name, parts[0], parts[1] if len(parts) > 1 else None)


def endpoints_for(*, endpoint_field: str, base_url: str) -> tuple[str, str | None] | None:
    """``(pub, replay)`` from a registry ``kv_events_endpoint`` (``PUB[,REPLAY]``)."""
    parts = [p.strip() for p in endpoint_field.split(",") if p.strip()]
    if not parts:
        return None
    host = urlsplit(base_url).hostname or "127.0.0.1"
    fixed = [p.replace("*", host).replace("0.0.0.0", host) for p in parts]
    return fixed[0], (fixed[1] if len(fixed) > 1 else None)


@dataclass
class _Stream:
    source: Source
    sub: zmq.Socket[bytes]
    last: int | None = None
    last_ts: float = 0.0
    synced: bool = False
    stats: dict[str, int] = field(
        default_factory=lambda: {"batches": 0, "resets": 0, "replayed": 0}
    )


class KVIndexer:
    """Owns the ZMQ sockets (one thread) and writes the index through a sync Redis client."""

    def __init__(
        self, *, redis: object, context: zmq.Context[zmq.Socket[bytes]] | None = None
    ) -> None:
        self.redis = redis
        self.ctx = context or zmq.Context.instance()
        self.streams: dict[str, _Stream] = {}
        self.poller = zmq.Poller()
        self._last_live = 0.0
        self._last_prune = time.time()

    # -- membership -------------------------------------------------------------------------

    def set_sources(self, sources: list[Source]) -> None:
        """Subscribe to new sources, drop workers no longer listed (index entries at once)."""
        wanted = {s.worker: s for s in sources}
        for name in list(self.streams):
            if name not in wanted or wanted[name] != self.streams[name].source:
                self._remove(name)
        for name, source in wanted.items():
            if name not in self.streams:
                sub = self.ctx.socket(zmq.SUB)
                sub.setsockopt(zmq.SUBSCRIBE, b"")
                sub.setsockopt(zmq.LINGER, 0)
                sub.setsockopt(zmq.RCVHWM, 100_000)
                sub.connect(source.endpoint)
                self.poller.register(sub, zmq.POLLIN)
                self.streams[name] = _Stream(source, sub)
                # A fresh subscription starts from nothing: what the worker held before
                # comes back through the replay when the first batch arrives.
                kv_index.drop_worker(self.redis, worker=name)
                if source.replay:
                    self._catch_up(self.streams[name], start=0)

    def _remove(self, name: str) -> None:
        stream = self.streams.pop(name)
        self.poller.unregister(stream.sub)
        stream.sub.close()
        kv_index.drop_worker(self.redis, worker=name)

    # -- the loop ---------------------------------------------------------------------------

    def poll_once(self, timeout_ms: int = 100) -> int:
        """Handle whatever arrived within ``timeout_ms``; returns batches applied."""
        applied = 0
        by_socket = {s.sub: s for s in self.streams.values()}
        for sock, _ in self.poller.poll(timeout_ms):
            stream = by_socket.get(sock)
            if stream is None:
                continue
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                applied += self._on_batch(stream, frames)
        now = time.time()
        if now - self._last_live >= LIVE_EVERY:
            self._last_live = now
            kv_index.mark_live(
                self.redis, workers=[n for n, s in self.streams.items() if s.synced], now=now
            )
        if now - self._last_prune >= PRUNE_EVERY:
            self._last_prune = now
            kv_index.prune_pending(self.redis, workers=list(self.streams), now=now)
        return applied

    def _on_batch(self, stream: _Stream, frames: list[bytes]) -> int:
        if len(frames) != 3 or len(frames[1]) != 8:
            logger.warning("malformed KV event frame from %s", stream.source.worker)
            return 0
        seq = int.from_bytes(frames[1], "big")
        try:
            decoded = decode_batch(frames[2])
        except Exception:  # an undecodable batch is a gap like any other
            logger.exception("undecodable KV event batch %d from %s", seq, stream.source.worker)
            decoded = None
        if stream.last is None:
            if seq > 0 and stream.source.replay:
                self._catch_up(stream, start=0, until=seq)
            if stream.last is None:
                stream.last = seq - 1
        elif seq <= stream.last:
            # Either a duplicate (the live stream queued batches the replay already
            # applied: they are older) or a restarted engine numbering from 0 again (its
            # batches are newer than anything applied, and its cache starts empty).
            if decoded is None or decoded[0] <= stream.last_ts:
                return 0
            self._reset(stream, reason="restart")
            stream.last = seq - 1
        elif seq > stream.last + 1:
            self._catch_up(stream, start=stream.last + 1, until=seq)
            if stream.last != seq - 1:
                self._reset(stream, reason="gap")
                stream.last = seq - 1
        self._apply(stream, seq, decoded)
        return 1

    def _apply(
        self,
        stream: _Stream,
        seq: int,
        decoded: tuple[float, list[dict[str, Any]], int | None] | None,
    ) -> None:
        if decoded is None:
            self._reset(stream, reason="undecodable")
            stream.last = seq
            return
        ts, events, _rank = decoded
        kv_index.apply_events(self.redis, worker=stream.source.worker, events=events)
        if stream.source.spec is not None:
            ok, bad = check_first_blocks(events, stream.source.spec)
            if ok or bad:
                if bad:
                    logger.warning(
                        "%s: %d block-0 hashes do not match %s",
                        stream.source.worker,
                        bad,
                        stream.source.spec,
                    )
                kv_index.record_hash_check(
                    self.redis, worker=stream.source.worker, matched=ok, mismatched=bad
                )
        stream.last = seq
        stream.last_ts = max(stream.last_ts, ts)
        stream.synced = True
        stream.stats["batches"] += 1

    def _reset(self, stream: _Stream, *, reason: str) -> None:
        logger.warning("KV index of %s reset (%s)", stream.source.worker, reason)
        stream.stats["resets"] += 1
        kv_index.drop_worker(self.redis, worker=stream.source.worker)

    def _catch_up(self, stream: _Stream, *, start: int, until: int | None = None) -> None:
        """Fetch and apply buffered batches ``start <= seq < until`` from the replay socket.

        The buffer may no longer reach back to ``start``: then ``stream.last`` stays short
        of ``until - 1`` and the caller resets the worker.
        """
        if not stream.source.replay:
            return
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(stream.source.replay)
        try:
            dealer.send_multipart([b"", start.to_bytes(8, "big")])
            first = True
            while dealer.poll(REPLAY_TIMEOUT_MS):
                frames = dealer.recv_multipart()
                seq_bytes, payload = frames[-2], frames[-1]
                if seq_bytes == END_SEQ:
                    if first and start == 0 and stream.last is None:
                        # The worker has published nothing yet: an empty index is exact.
                        stream.synced = True
                    break
                seq = int.from_bytes(seq_bytes, "big")
                if until is not None and seq >= until:
                    continue
                if first and seq > start:
                    # The buffer starts after what we need: the gap cannot be filled.
                    if stream.last is not None:
                        return
                    self._reset(stream, reason="replay-short")
                first = False
                if stream.last is not None and seq <= stream.last:
                    continue
                try:
                    decoded = decode_batch(payload)
                except Exception:  # undecodable: the caller sees the gap and resets
                    return
                self._apply(stream, seq, decoded)
                stream.stats["replayed"] += 1
            else:
                logger.warning("replay from %s timed out", stream.source.worker)
        finally:
            dealer.close()

    def close(self) -> None:
        for name in list(self.streams):
            stream = self.streams.pop(name)
            self.poller.unregister(stream.sub)
            stream.sub.close()


class IndexerThread:
    """Runs a :class:`KVIndexer` in a background thread (tests and benchmarks)."""

    def __init__(
        self,
        *,
        redis: object,
        sources: list[Source] | Callable[[], list[Source]],
        refresh_seconds: float = 1.0,
    ) -> None:
        self.indexer = KVIndexer(redis=redis, context=zmq.Context())
        self._sources = sources
        self._refresh = refresh_seconds
        self._stop = threading.Event()
        self._pending: list[Source] | None = None
        self._thread = threading.Thread(target=self._run, name="kv-indexer", daemon=True)

    def start(self) -> IndexerThread:
        self._thread.start()
        return self

    def set_sources(self, sources: list[Source]) -> None:
        """Change membership from another thread (applied by the indexer's own thread)."""
        self._pending = list(sources)

    def _run(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            if self._pending is not None:
                pending, self._pending = self._pending, None
                self.indexer.set_sources(pending)
            elif callable(self._sources) and time.monotonic() - last >= self._refresh:
                last = time.monotonic()
                self.indexer.set_sources(self._sources())
            elif not callable(self._sources) and not last:
                last = time.monotonic()
                self.indexer.set_sources(self._sources)
            self.indexer.poll_once(50)

    def stop(self) -> None:
        if self._stop.is_set():  # stopped already (a test may stop it before teardown)
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self.indexer.close()
        self.indexer.ctx.term()


_explained: set[str] = set()


def registry_sources() -> list[Source]:
    """Healthy registered workers that publish KV events (needs Django set up)."""
    from workers.hash_config import worker_hash_spec
    from workers.models import Worker, WorkerState
    from workers.services import kv_events_problem

    sources = []
    for w in Worker.objects.filter(state=WorkerState.HEALTHY).exclude(kv_events_endpoint=""):
        problem = kv_events_problem(w.kv_events_endpoint)
        if problem:  # registered before the check existed: say why nothing will arrive
            if w.name not in _explained:
                _explained.add(w.name)
                logger.error("not subscribing to %s: %s", w.name, problem)
            continue
        endpoints = endpoints_for(endpoint_field=w.kv_events_endpoint, base_url=w.base_url)
        if endpoints:
            sources.append(Source(w.name, *endpoints, spec=worker_hash_spec(w)[0]))
    return sources


def main(argv: list[str] | None = None) -> int:
    """``python -m workers.kv_indexer``: run until killed."""
    import redis

    parser = argparse.ArgumentParser(prog="kv_indexer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL"))
    parser.add_argument("--source", action="append", default=[], type=Source.parse)
    parser.add_argument("--from-registry", action="store_true")
    args = parser.parse_args(argv)
    if not args.redis:
        parser.error("--redis or REDIS_URL is required")
    logging.basicConfig(level=logging.INFO)
    client = redis.Redis.from_url(args.redis)
    if args.from_registry:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
        import django

        django.setup()
    indexer = KVIndexer(redis=client)
    last = 0.0
    try:
        while True:
            if time.monotonic() - last >= 1.0:
                last = time.monotonic()
                sources = list(args.source)
                if args.from_registry:
                    from django.db import close_old_connections

                    close_old_connections()
                    sources += registry_sources()
                indexer.set_sources(sources)
            indexer.poll_once(100)
    except KeyboardInterrupt:
        return 0
    finally:
        indexer.close()


if __name__ == "__main__":
    raise SystemExit(main())
