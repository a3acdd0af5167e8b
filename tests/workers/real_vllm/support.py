"""Reading a real vLLM's KV events, and prompts long enough for its 128-token CPU blocks."""

from __future__ import annotations

import random
from typing import Any

import zmq

from tests.workers.real_vllm.runtime import VllmServer
from workers.engine.kv_events import END_SEQ, decode_batch

WORDS = (
    "refund policy customer invoice shipment warranty contract clause tenant ledger "
    "cache prefix block token router gateway budget quota region replica latency"
).split()


def long_text(seed: int, words: int = 220) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def replay_events(
    server: VllmServer, *, start: int = 0, timeout_ms: int = 5000
) -> list[dict[str, Any]]:
    """Every buffered event batch from ``start`` on, through the replay ROUTER, in order."""
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(f"tcp://127.0.0.1:{server.replay_port}")
    events: list[dict[str, Any]] = []
    try:
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        while dealer.poll(timeout_ms):
            frames = dealer.recv_multipart()
            if frames[-2] == END_SEQ:
                break
            events += decode_batch(frames[-1])[1]
    finally:
        dealer.close()
        ctx.term()
    return events


def stored_hashes(events: list[dict[str, Any]]) -> set[int]:
    out: set[int] = set()
    for event in events:
        if event.get("type") == "BlockStored":
            for h in event.get("block_hashes") or ():
                out.add(int.from_bytes(h[-8:], "big") if isinstance(h, bytes) else int(h))
    return out
