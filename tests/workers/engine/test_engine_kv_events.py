"""KV events on the wire: ZMQ framing, both msgpack encodings, vLLM's hashes, and replay."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import msgspec
import pytest
import zmq

from workers.engine.hashing import block_hash_chain, event_hash
from workers.engine.kv_events import KVEventsConfig, create_publisher, decode_batch
from workers.engine.launcher import RunningWorker

MODEL = "test/ref-tiny"
TOPIC = "kv@127.0.0.1@test"
Frames = tuple[bytes, int, bytes]


class Subscriber:
    """A SUB socket plus the batches it has seen, in order."""

    def __init__(self, worker: RunningWorker) -> None:
        self.worker = worker
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.connect(worker.kv_events_endpoint or "")
        self.sub.subscribe(TOPIC.encode())
        self.frames: list[Frames] = []
        self._probe()

    def _probe(self) -> None:
        # PUB drops what it sends before a subscription arrives (ZMQ's slow joiner), so send
        # tiny salted requests until one of their batches gets through.
        for attempt in range(100):
            _complete(self.worker, "probe", salt=f"probe-{attempt}")
            if self.sub.poll(100):
                self.drain()
                return
        raise AssertionError("no KV event reached the subscriber")

    def drain(self, timeout_ms: int = 100) -> list[Frames]:
        got = []
        while self.sub.poll(timeout_ms):
            topic, seq, payload = self.sub.recv_multipart()
            got.append((topic, int.from_bytes(seq, "big"), payload))
        self.frames.extend(got)
        return got

    def until(self, wanted: Callable[[dict], bool], timeout_s: float = 10) -> list[dict]:
        """Collect decoded events until one matches ``wanted``."""
        events: list[dict] = []
        for _ in range(int(timeout_s * 10)):
            for _, _, payload in self.drain():
                events.extend(decode_batch(payload)[1])
            if any(wanted(e) for e in events):
                return events
        raise AssertionError(f"event not seen; got {events}")

    def close(self) -> None:
        self.sub.close(linger=0)
        self.ctx.term()


def _complete(worker: RunningWorker, prompt: str, *, salt: str | None = None) -> dict:
    body: dict = {"model": MODEL, "prompt": prompt * 20, "max_tokens": 3, "temperature": 0}
    if salt:
        body["cache_salt"] = salt
    response = httpx.post(f"{worker.base_url}/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _events_worker(make_worker: Callable[..., RunningWorker], encoding: str) -> RunningWorker:
    config = KVEventsConfig(
        enable_kv_cache_events=True,
        publisher="zmq",
        endpoint="tcp://127.0.0.1:*",
        replay_endpoint="tcp://127.0.0.1:*",
        topic=TOPIC,
        encoding=encoding,
    )
    # 12 usable blocks and a 144-token context: two long prompts cannot both stay cached.
    return make_worker(dev_mode=True, kv_events=config, num_blocks=13, max_model_len=144)


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_events_carry_vllm_hashes_in_both_encodings_and_replay(
    make_worker: Callable[..., RunningWorker], encoding: str
) -> None:
    worker = _events_worker(make_worker, encoding)
    sub = Subscriber(worker)
    try:
        text = "tenan"  # repeated 20 times: 100 bytes + BOS = 101 tokens, 6 full blocks
        tokens = httpx.post(f"{worker.base_url}/tokenize", json={"prompt": text * 20}).json()
        ids = tokens["tokens"]
        expected = [event_hash(h) for h in block_hash_chain(ids, cache_salt="tenant-a")]
        _complete(worker, text, salt="tenant-a")
        events = sub.until(lambda e: e.get("block_hashes") == expected)
        (stored,) = [e for e in events if e.get("block_hashes") == expected]
        assert stored == {
            "type": "BlockStored",
            "block_hashes": expected,
            "parent_block_hash": None,
            "token_ids": ids[:96],
            "block_size": 16,
            "lora_id": None,
            "medium": "GPU",
            "lora_name": None,
            "extra_keys": [("tenant-a",)] + [None] * 5,  # published untagged, as vLLM 0.32
            "group_idx": 0,
            "kv_cache_spec_kind": "full_attention",
            "kv_cache_spec_sliding_window": None,
        }

        # The raw payload has the requested shape: [ts, [events], rank].
        def has_stored(frame: Frames) -> bool:
            return any(e.get("block_hashes") == expected for e in decode_batch(frame[2])[1])

        topic, _, payload = next(f for f in sub.frames if has_stored(f))
        assert topic == TOPIC.encode()
        ts, raw_events, rank = msgspec.msgpack.decode(payload)
        assert isinstance(ts, float) and rank == 0
        # Evictions made by the same step's allocation share the batch; the store is last.
        raw = raw_events[-1]
        if encoding == "map":
            # Defaulted fields are omitted; required ones are sent even when null.
            assert raw["type"] == "BlockStored" and raw["lora_name"] is None
            assert "kv_cache_spec_sliding_window" not in raw
        else:
            # msgspec writes every field of array-like structs (jcrist/msgspec#720).
            assert raw == [
                "BlockStored",
                expected,
                None,
                ids[:96],
                16,
                None,
                "GPU",
                None,
                [["tenant-a"]] + [None] * 5,
                0,
                "full_attention",
                None,
            ]

        # Another long prompt under pressure evicts the first chain, tail first.
        _complete(worker, "other", salt="tenant-a")
        removed = sub.until(
            lambda e: e["type"] == "BlockRemoved" and e["block_hashes"][0] == expected[-1]
        )
        assert all(e["medium"] == "GPU" for e in removed if e["type"] == "BlockRemoved")

        assert httpx.post(f"{worker.base_url}/reset_prefix_cache").status_code == 200
        sub.until(lambda e: e["type"] == "AllBlocksCleared")

        seqs = [seq for _, seq, _ in sub.frames]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert _replay(worker, 0)[seqs[0] :] == [(seq, p) for _, seq, p in sub.frames]
        assert _replay(worker, seqs[-1]) == [(seqs[-1], sub.frames[-1][2])]
    finally:
        sub.close()


def _replay(worker: RunningWorker, start: int) -> list[tuple[int, bytes]]:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    try:
        dealer.connect(worker.kv_events_replay_endpoint or "")
        dealer.send_multipart([b"", start.to_bytes(8, "big")])  # REQ-style envelope
        batches = []
        while True:
            assert dealer.poll(5000), "replay stalled"
            _, _topic, seq_bytes, payload = dealer.recv_multipart()  # as vLLM 0.32 sends
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if seq == -1:
                assert payload == b""
                return batches
            batches.append((seq, payload))
    finally:
        dealer.close(linger=0)
        ctx.term()


def test_publisher_connects_to_a_central_collector_without_a_wildcard(
    make_worker: Callable[..., RunningWorker],
) -> None:
    ctx = zmq.Context()
    collector = ctx.socket(zmq.SUB)
    try:
        port = collector.bind_to_random_port("tcp://127.0.0.1")
        collector.subscribe(b"")
        endpoint = f"tcp://127.0.0.1:{port}"
        config = KVEventsConfig(enable_kv_cache_events=True, endpoint=endpoint, topic="t")
        worker = make_worker(kv_events=config)
        assert worker.kv_events_endpoint == endpoint
        for attempt in range(100):
            _complete(worker, "central", salt=f"c-{attempt}")
            if collector.poll(100):
                topic, seq, payload = collector.recv_multipart()
                assert topic == b"t" and len(seq) == 8
                assert decode_batch(payload)[1][-1]["type"] == "BlockStored"
                return
        raise AssertionError("the collector received nothing")
    finally:
        collector.close(linger=0)
        ctx.term()


def test_events_config_parses_vllm_json_and_rejects_unknown_keys() -> None:
    config = KVEventsConfig.from_json(json.dumps({"enable_kv_cache_events": True}))
    assert (config.resolved_publisher, config.endpoint, config.encoding) == (
        "zmq",
        "tcp://*:5557",
        "map",
    )
    with pytest.raises(ValueError, match="unknown"):
        KVEventsConfig.from_json('{"enable_kv_cache_events": true, "encodng": "array"}')
    with pytest.raises(ValueError, match="encoding"):
        KVEventsConfig(encoding="cbor")
    null = create_publisher(KVEventsConfig(enable_kv_cache_events=True, publisher="null"))
    assert null.endpoint is None
    assert create_publisher(KVEventsConfig(publisher="zmq")).endpoint is None  # disabled
