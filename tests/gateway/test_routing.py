"""Worker choice: the prefix index's holders and the bounded-load order (no I/O), and the
event-exact mode against real Redis (the index written as the KV indexer writes it)."""

from __future__ import annotations

import time

from gateway.directory import WorkerView
from gateway.routing import HOLDERS, PrefixIndex, order_candidates, prefix_chain


def _workers(n: int = 4, **usage: float) -> list[WorkerView]:
    return [
        WorkerView(
            name=f"w{i}",
            base_url=f"http://w{i}",
            model="m",
            pool="p",
            block_size=16,
            kv_usage=usage.get(f"w{i}", 0.0),
        )
        for i in range(n)
    ]


def test_a_spill_adds_a_holder_instead_of_replacing_the_last_one():
    index = PrefixIndex()
    chain = prefix_chain("x" * 64 * 4, salt="t1", block_size=16)
    index.record(chain, "w0")
    index.record(chain, "w2")
    assert index.holders(chain) == (("w2", "w0"), 4)
    assert index.longest(chain) == ("w2", 4)
    index.record(chain, "w0")  # served again: most recent first, no duplicate
    assert index.holders(chain) == (("w0", "w2"), 4)


def test_holders_are_bounded_and_the_longest_prefix_wins():
    index = PrefixIndex()
    short = prefix_chain("a" * 64 * 2, salt="t1", block_size=16)
    long = prefix_chain("a" * 64 * 2 + "b" * 64 * 2, salt="t1", block_size=16)
    for n in range(HOLDERS + 2):
        index.record(short, f"w{n}")
    assert index.holders(short)[0] == tuple(f"w{n}" for n in range(HOLDERS + 1, 1, -1))
    index.record(long, "w9")
    assert index.holders(long) == (("w9",), 4)
    assert index.holders(["unknown"]) == ((), 0)


def test_forgetting_a_worker_keeps_the_other_holders():
    index = PrefixIndex()
    chain = prefix_chain("y" * 64, salt="t1", block_size=16)
    index.record(chain, "w1")
    index.record(chain, "w3")
    index.forget_worker("w3")
    assert index.longest(chain) == ("w1", 1)
    index.forget_worker("w1")
    assert index.longest(chain) == (None, 0)


def test_preferred_holders_come_first_in_their_order():
    workers = _workers()
    ordered = order_candidates(key="k", workers=workers, inflight={}, preferred=("w3", "w1"))
    assert [w.name for w in ordered[:2]] == ["w3", "w1"]
    assert order_candidates(key="k", workers=workers, inflight={}, preferred="w2")[0].name == "w2"


def test_a_holder_at_the_average_load_is_kept_and_one_above_the_bound_is_skipped():
    workers = _workers()
    # 7 in flight + this one over 4 workers: bound ceil(1.25 x 8 / 4) = 3.
    inflight = {"w0": 2, "w1": 2, "w2": 2, "w3": 1}
    assert (
        order_candidates(key="k", workers=workers, inflight=inflight, preferred=("w0",))[0].name
        == "w0"
    )
    inflight = {"w0": 3, "w1": 2, "w2": 1, "w3": 1}
    ordered = order_candidates(key="k", workers=workers, inflight=inflight, preferred=("w0", "w2"))
    assert ordered[0].name == "w2" and ordered[-1].name == "w0"


def test_a_hot_worker_is_passed_over_while_a_cool_one_exists():
    workers = _workers(w0=0.95)
    ordered = order_candidates(key="k", workers=workers, inflight={}, preferred=("w0",))
    assert ordered[0].name != "w0" and ordered[-1].name == "w0"


# --- event-exact routing (real Redis, index written as the indexer writes it) --------------


def _route(workers, body, **kw):
    import asyncio

    from gateway import routing

    async def go():
        routing.pending_index._entries.clear()
        return await routing.route_request(
            body=body,
            kind="chat",
            text=body["messages"][0]["content"],
            workers=workers,
            salt=kw.get("salt", "tenant-a"),
            tenant_id="t",
            session=None,
            inflight=kw.get("inflight", {}),
            approx_index=PrefixIndex(),
            replica="test",
        )

    return asyncio.run(go())


def _hold(redis, worker: str, body, salt: str = "tenant-a") -> int:
    from workers import kv_index
    from workers.request_hashing import request_block_hashes

    hashes = request_block_hashes(body, kind="chat", engine="reference", salt=salt, block_size=16)
    kv_index.apply_events(
        redis,
        worker=worker,
        events=[{"type": "BlockStored", "block_hashes": hashes, "medium": "GPU"}],
    )
    return len(hashes)


BODY = {
    "messages": [
        {"role": "system", "content": "policy text " * 40},
        {"role": "user", "content": "q"},
    ]
}


def test_exact_mode_sends_the_request_to_the_worker_that_really_holds_its_blocks(redis_flush):
    from gateway.routing import ROUTES
    from workers import kv_index

    workers = _workers()
    blocks = _hold(redis_flush, "w2", BODY)
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    before = ROUTES.labels(mode="exact", reason="fresh")._value.get()
    decision = _route(workers, BODY)
    assert decision.mode == "exact"
    assert decision.candidates[0].name == "w2"
    assert decision.routed_tokens == decision.available_tokens == blocks * 16
    assert ROUTES.labels(mode="exact", reason="fresh")._value.get() == before + 1
    # Another tenant's identical prompt matches nothing (the salt is in block 0).
    assert _route(workers, BODY, salt="tenant-b").available_tokens == 0


def test_a_busy_holder_spills_by_the_fleet_load_every_replica_sees(redis_flush):
    from workers import kv_index, load_state

    workers = _workers()
    _hold(redis_flush, "w2", BODY)
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    pipe = redis_flush.pipeline()
    # Another replica has 6 requests in flight on w2; this one has none.
    load_state.queue_add(pipe, replica="other", worker="w2", delta=6, now=time.time())
    pipe.execute()
    decision = _route(workers, BODY)
    assert decision.mode == "exact"
    assert decision.candidates[0].name != "w2"
    assert decision.candidates[-1].name == "w2"


def test_a_stale_index_falls_back_to_the_approximate_guess(redis_flush):
    from workers import kv_index

    workers = _workers()
    _hold(redis_flush, "w2", BODY)
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers], now=time.time() - 60)
    decision = _route(workers, BODY)
    assert (decision.mode, decision.reason) == ("approximate", "stale_index")
    assert decision.chain  # still recorded in the approximate index after the answer
