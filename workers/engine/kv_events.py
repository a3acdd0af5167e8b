"""KV cache events over ZMQ, as vLLM publishes them (``vllm/distributed/kv_events.py``).

Wire format: PUB multipart ``[topic, seq (8-byte big-endian, from 0), payload]``, one batch
per engine step that produced events. ``payload`` is msgpack of the positional array
``[ts, [events], data_parallel_rank]``. Events are tagged by class name in one of two shapes:

* ``"map"`` (current vLLM, the default): ``{"type": "BlockStored", "block_hashes": ...}``
* ``"array"`` (vLLM <= 0.23): ``["BlockStored", block_hashes, parent_block_hash, ...]``

msgspec's ``omit_defaults`` drops default-valued fields (trailing ones in the array shape),
exactly as in vLLM. Choosing the shape is a Cacheplane extension of the JSON config:
``"encoding": "map" | "array"``. Replay: a ROUTER at ``replay_endpoint`` answers an 8-byte
start seq with ``[seq, payload]`` for every buffered batch >= start, then ``[-1, b""]``.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, fields
from typing import Any

import msgspec
import zmq

logger = logging.getLogger(__name__)

MEDIUM_GPU = "GPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


# Field order and defaults mirror vLLM's structs: required fields are always sent, fields
# with a default are omitted when they hold it.
class _MapEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base of the map-shaped events (``{"type": <class name>, ...}``)."""


class BlockStored(_MapEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(_MapEvent):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(_MapEvent):
    pass


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared


class _ArrayEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Base of the positional events (``[<class name>, field, ...]``)."""


class _ArrayBlockStored(_ArrayEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class _ArrayBlockRemoved(_ArrayEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class _ArrayAllBlocksCleared(_ArrayEvent, tag="AllBlocksCleared"):
    pass


_TO_ARRAY: dict[type, type] = {
    BlockStored: _ArrayBlockStored,
    BlockRemoved: _ArrayBlockRemoved,
    AllBlocksCleared: _ArrayAllBlocksCleared,
}


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


@dataclass(frozen=True)
class KVEventsConfig:
    """vLLM's ``--kv-events-config`` JSON, plus the Cacheplane ``encoding`` key."""

    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""
    encoding: str = "map"

    def __post_init__(self) -> None:
        if self.publisher not in (None, "zmq", "null"):
            raise ValueError(f"Unknown event publisher {self.publisher!r}; use 'zmq' or 'null'")
        if self.encoding not in ("map", "array"):
            raise ValueError(f"kv events encoding must be 'map' or 'array', not {self.encoding!r}")

    @property
    def resolved_publisher(self) -> str:
        # Since vLLM #26915 the publisher defaults to zmq once events are enabled.
        return self.publisher or ("zmq" if self.enable_kv_cache_events else "null")

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> KVEventsConfig:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        if not isinstance(data, dict):
            raise ValueError("--kv-events-config must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown --kv-events-config keys: {unknown}; known: {sorted(known)}")
        return cls(**data)


def encode_batch(events: list[KVCacheEvent], *, encoding: str, ts: float, dp_rank: int) -> bytes:
    """Serialize one step's events as vLLM does, in the chosen event shape."""
    if encoding == "array":
        wire: list[Any] = [_TO_ARRAY[type(e)](**msgspec.structs.asdict(e)) for e in events]
    else:
        wire = list(events)
    return msgspec.msgpack.encode(KVEventBatch(ts=ts, events=wire, data_parallel_rank=dp_rank))


_ArrayEvent_ = _ArrayBlockStored | _ArrayBlockRemoved | _ArrayAllBlocksCleared
_FIELD_NAMES = {
    cls.__name__: tuple(f.name for f in msgspec.structs.fields(cls)) for cls in _TO_ARRAY
}


def decode_batch(payload: bytes) -> tuple[float, list[dict[str, Any]], int | None]:
    """Decode a batch in either event shape into ``(ts, [event dicts], dp_rank)``.

    Each known event becomes the full field dict (``"type"`` plus every field, defaults
    filled in), whichever shape it came in; unknown events pass through as decoded. Like
    llm-d's and Dynamo's decoders it also takes a batch without the rank and a map-shaped
    batch (``{"ts", "events", "data_parallel_rank"}``).
    """
    raw = msgspec.msgpack.decode(payload)
    if isinstance(raw, dict):
        ts, raw_events, rank = raw["ts"], raw["events"], raw.get("data_parallel_rank")
    else:
        ts, raw_events = raw[0], raw[1]
        rank = raw[2] if len(raw) > 2 else None
    return ts, [_event_dict(e) for e in raw_events], rank


def _event_dict(raw: Any) -> dict[str, Any]:
    target = KVCacheEvent if isinstance(raw, dict) else _ArrayEvent_
    try:
        event = msgspec.convert(raw, target)
    except msgspec.ValidationError:
        # An older or newer shape than ours: keep what it says, named where we can.
        if isinstance(raw, dict):
            return dict(raw)
        names = _FIELD_NAMES.get(raw[0], ())
        return {"type": raw[0], **dict(zip(names, raw[1:], strict=False))}
    return {"type": type(event).__struct_config__.tag, **msgspec.structs.asdict(event)}


class EventPublisher:
    """No-op publisher (``publisher: "null"``); the ZMQ one overrides both methods."""

    endpoint: str | None = None
    replay_endpoint: str | None = None

    def publish(self, events: list[KVCacheEvent]) -> None:
        return

    def shutdown(self) -> None:
        return


class ZmqEventPublisher(EventPublisher):
    """PUB socket plus optional ROUTER replay, served by one thread that owns both sockets.

    ZMQ sockets are not thread-safe, so the engine thread only enqueues; this thread
    numbers, encodes, sends and buffers the batches and answers replay requests.
    """

    def __init__(self, config: KVEventsConfig, *, dp_rank: int = 0) -> None:
        self._config = config
        self._dp_rank = dp_rank
        self._queue: queue.Queue[list[KVCacheEvent] | None] = queue.Queue(config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.setsockopt(zmq.LINGER, 500)
        ep = config.endpoint
        # vLLM's rule: bind where the endpoint is a wildcard or local transport, else connect
        # (a central collector binds and every worker connects to it).
        if "*" in ep or "::" in ep or ep.startswith(("ipc://", "inproc://")):
            self._pub.bind(ep)
            self.endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        else:
            self._pub.connect(ep)
            self.endpoint = ep
        self._replay: zmq.Socket[bytes] | None = None
        if config.replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(config.replay_endpoint)
            self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        self._topic = config.topic.encode("utf-8")
        self._seq = 0
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    def publish(self, events: list[KVCacheEvent]) -> None:
        if events:
            self._queue.put(list(events))

    def shutdown(self) -> None:
        if self._ctx.closed:
            return
        self._queue.put(None)
        self._thread.join(timeout=5)
        self._pub.close()
        if self._replay is not None:
            self._replay.close()
        self._ctx.term()

    def _run(self) -> None:
        while True:
            if self._replay is not None:
                while self._replay.poll(0):
                    self._serve_replay()
            try:
                item = self._queue.get(timeout=0.02)
            except queue.Empty:
                continue
            if item is None:
                return
            payload = encode_batch(
                item, encoding=self._config.encoding, ts=time.time(), dp_rank=self._dp_rank
            )
            seq = self._seq
            self._seq += 1
            try:
                self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            except zmq.ZMQError:
                logger.exception("KV event batch %d could not be sent", seq)
            self._buffer.append((seq, payload))

    def _serve_replay(self) -> None:
        frames = self._replay.recv_multipart()  # type: ignore[union-attr]
        # REQ clients add an empty delimiter frame, DEALER clients may not; accept both.
        identity, start_bytes = frames[0], frames[-1]
        envelope = [identity, b""] if len(frames) == 3 else [identity]
        if len(start_bytes) != 8:
            logger.warning("ignoring replay request with a %d-byte start seq", len(start_bytes))
            return
        start = int.from_bytes(start_bytes, "big")
        for seq, payload in list(self._buffer):
            if seq >= start:
                # As vLLM 0.32: the topic frame too, as on the live stream.
                self._replay.send_multipart(  # type: ignore[union-attr]
                    [*envelope, self._topic, seq.to_bytes(8, "big"), payload]
                )
        self._replay.send_multipart([*envelope, b"", END_SEQ, b""])  # type: ignore[union-attr]


def create_publisher(config: KVEventsConfig | None) -> EventPublisher:
    if config is None or not config.enable_kv_cache_events:
        return EventPublisher()
    if config.resolved_publisher == "zmq":
        return ZmqEventPublisher(config)
    return EventPublisher()
