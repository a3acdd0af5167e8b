"""The KV-event index: a real reference worker's ZMQ events, the indexer, real Redis."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.workers.engine.support import tiny_config
from workers import kv_index
from workers.engine.kv_events import KVEventsConfig
from workers.engine.launcher import serve
from workers.kv_indexer import IndexerThread, Source
from workers.request_hashing import REFERENCE_SPEC, request_block_hashes

pytestmark = pytest.mark.slow
SYSTEM = "You are the support assistant. " * 12  # ~370 tokens: 20+ full blocks


def _events() -> KVEventsConfig:
    return KVEventsConfig(
        enable_kv_cache_events=True,
        publisher="zmq",
        endpoint="tcp://127.0.0.1:*",
        replay_endpoint="tcp://127.0.0.1:*",
    )


def _chat(worker, salt: str) -> dict:
    body = {
        "model": "test/ref-tiny",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
        "max_tokens": 1,
        "cache_salt": salt,
    }
    assert httpx.post(f"{worker.base_url}/v1/chat/completions", json=body).status_code == 200
    return body


def _depth(redis, worker: str, body: dict, salt: str) -> tuple[int, int]:
    hashes = request_block_hashes(body, kind="chat", spec=REFERENCE_SPEC, salt=salt)
    pipe = redis.pipeline(transaction=False)
    kv_index.queue_lookup(pipe, workers=[worker], hashes=hashes)
    depths, _fresh = kv_index.parse_lookup(
        pipe.execute(), workers=[worker], hashes=hashes, now=time.time()
    )
    return depths[worker], len(hashes)


def _until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)
    return value


def test_the_index_holds_exactly_the_salted_blocks_the_worker_stored(redis_flush):
    with serve(
        tiny_config(num_blocks=256, max_model_len=1024, kv_events=_events()), dev_mode=True
    ) as w:
        # The worker served a request before the indexer existed: the replay fills it in.
        body = _chat(w, "tenant-a")
        source = Source("w0", w.kv_events_endpoint, w.kv_events_replay_endpoint)
        indexer = IndexerThread(redis=redis_flush, sources=[source]).start()
        try:
            depth, blocks = _until(
                lambda: (d := _depth(redis_flush, "w0", body, "tenant-a"))[0] and d
            )
            assert depth == blocks > 20  # every full prompt block, hashed as the engine did
            # The same prompt under another tenant's salt shares nothing.
            assert _depth(redis_flush, "w0", body, "tenant-b")[0] == 0
            _until(lambda: redis_flush.hget(kv_index.LIVE_KEY, "w0"))
            # AllBlocksCleared (a prefix-cache reset) empties the worker's entry.
            httpx.post(f"{w.base_url}/reset_prefix_cache")
            _until(lambda: _depth(redis_flush, "w0", body, "tenant-a")[0] == 0)
            # A worker that leaves the membership is dropped at once, liveness included.
            _chat(w, "tenant-a")
            _until(lambda: _depth(redis_flush, "w0", body, "tenant-a")[0])
            indexer.set_sources([])
            _until(lambda: not redis_flush.exists(kv_index.worker_key("w0")))
            assert redis_flush.hget(kv_index.LIVE_KEY, "w0") is None
        finally:
            indexer.stop()


def test_block_removed_takes_one_copy_and_the_field_goes_at_zero(redis_flush):
    stored = {"type": "BlockStored", "block_hashes": [7, 8], "medium": "GPU"}
    kv_index.apply_events(redis_flush, worker="w1", events=[stored, stored])
    removed = {"type": "BlockRemoved", "block_hashes": [7], "medium": "GPU"}
    kv_index.apply_events(redis_flush, worker="w1", events=[removed])
    assert redis_flush.hget(kv_index.worker_key("w1"), "7") == b"1"
    kv_index.apply_events(redis_flush, worker="w1", events=[removed])
    assert redis_flush.hget(kv_index.worker_key("w1"), "7") is None
    # CPU-tier blocks do not count: prefill skips only what is on the GPU.
    kv_index.apply_events(
        redis_flush,
        worker="w1",
        events=[{"type": "BlockStored", "block_hashes": [9], "medium": "CPU"}],
    )
    assert redis_flush.hget(kv_index.worker_key("w1"), "9") is None
