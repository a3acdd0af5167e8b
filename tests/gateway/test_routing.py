"""Worker choice: the prefix index's holders and the bounded-load order (no I/O), and the
event-exact mode against real Redis (the index written as the KV indexer writes it)."""

from __future__ import annotations

import asyncio
import time

import pytest

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

    from gateway import routing

    async def go():
        # Each call plays a fresh gateway process: nothing routed before is remembered
        # locally, only what is in Redis (and each event loop gets its own client).
        routing.forget_local_state()
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
            replica=kw.get("replica", "test"),
        )

    return asyncio.run(go())


def _hold(redis, worker: str, body, salt: str = "tenant-a") -> int:
    from workers import kv_index
    from workers.request_hashing import REFERENCE_SPEC, request_block_hashes

    hashes = request_block_hashes(body, kind="chat", spec=REFERENCE_SPEC, salt=salt)
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
    from prometheus_client import REGISTRY

    from workers import kv_index

    def routed() -> float:
        labels = {"mode": "exact", "reason": "fresh"}
        return REGISTRY.get_sample_value("cacheplane_gateway_route_total", labels) or 0.0

    workers = _workers()
    blocks = _hold(redis_flush, "w2", BODY)
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    before = routed()
    decision = _route(workers, BODY)
    assert decision.mode == "exact"
    assert decision.candidates[0].name == "w2"
    assert decision.routed_tokens == decision.available_tokens == blocks * 16
    assert routed() == before + 1
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


def test_a_dead_replicas_in_flight_count_stops_counting(redis_flush):
    """A replica whose beat stopped (it died mid-request, never decrementing) no longer
    loads its worker: the routing script skips its count and deletes it."""
    from workers import kv_index, load_state

    workers = _workers()
    _hold(redis_flush, "w2", BODY)
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    pipe = redis_flush.pipeline()
    load_state.queue_add(pipe, replica="gone", worker="w2", delta=6, now=time.time() - 60)
    pipe.execute()
    decision = _route(workers, BODY)
    assert decision.mode == "exact"
    assert decision.candidates[0].name == "w2"
    assert not redis_flush.hexists(load_state.INFLIGHT_KEY, "gone|w2")


def test_a_stale_index_falls_back_to_the_approximate_guess(redis_flush):
    from workers import kv_index

    workers = _workers()
    _hold(redis_flush, "w2", BODY)
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers], now=time.time() - 60)
    decision = _route(workers, BODY)
    assert (decision.mode, decision.reason) == ("approximate", "stale_index")
    assert decision.chain  # still recorded in the approximate index after the answer


def test_the_first_request_that_finds_a_stale_index_fresh_again_is_routed_exactly(redis_flush):
    """One gateway process: after a stale look it skips hashing, yet loses no request."""
    from gateway import routing
    from workers import kv_index

    workers = _workers()
    names = [w.name for w in workers]
    _hold(redis_flush, "w2", BODY)
    kv_index.mark_live(redis_flush, workers=names, now=time.time() - 60)

    async def route():
        return await routing.route_request(
            body=BODY,
            kind="chat",
            text=BODY["messages"][0]["content"],
            workers=workers,
            salt="tenant-a",
            tenant_id="t",
            session=None,
            inflight={},
            approx_index=PrefixIndex(),
            replica="test",
        )

    async def go():
        routing.forget_local_state()
        stale = [await route(), await route()]
        kv_index.mark_live(redis_flush, workers=names)
        return stale, await route()

    stale, fresh = asyncio.run(go())
    assert [(d.mode, d.reason) for d in stale] == [("approximate", "stale_index")] * 2
    assert (fresh.mode, fresh.reason) == ("exact", "fresh")
    assert fresh.candidates[0].name == "w2"


# --- pending placements: routing intent every replica sees before the events arrive -----

NEW = {
    "messages": [
        {"role": "system", "content": "a brand new document " * 30},
        {"role": "user", "content": "q"},
    ]
}


def test_another_replica_follows_a_new_prefix_to_where_the_first_one_sent_it(redis_flush):
    from workers import kv_index

    workers = _workers()
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    first = _route(workers, NEW, replica="gw-a")
    assert first.available_tokens == 0  # new to the whole fleet
    chosen = first.candidates[0].name
    # Without the claim a new prefix would go to a less loaded worker; with it, the
    # chosen one holds it (and stays within the load bound).
    load = {w.name: 1 for w in workers} | {chosen: 2}
    second = _route(workers, NEW, replica="gw-b", inflight=load)
    assert second.candidates[0].name == chosen
    assert second.available_tokens == second.routed_tokens > 0
    # Another tenant's identical prompt is not covered by the claim (salted hashes).
    assert _route(workers, NEW, replica="gw-c", salt="tenant-b").available_tokens == 0


def test_the_workers_block_stored_event_replaces_the_claim(redis_flush):
    from workers import kv_index
    from workers.request_hashing import REFERENCE_SPEC, request_block_hashes

    workers = _workers()
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    chosen = _route(workers, NEW, replica="gw-a").candidates[0].name
    pending = kv_index.pending_key(chosen)
    hashes = request_block_hashes(NEW, kind="chat", spec=REFERENCE_SPEC, salt="tenant-a")
    assert redis_flush.hlen(pending) == len(hashes)
    kv_index.apply_events(
        redis_flush,
        worker=chosen,
        events=[{"type": "BlockStored", "block_hashes": hashes, "medium": "GPU"}],
    )
    assert redis_flush.hlen(pending) == 0
    busy = {w.name: 1 for w in workers}  # the first request's reservation is within bounds
    assert _route(workers, NEW, replica="gw-b", inflight=busy).candidates[0].name == chosen


def test_an_expired_claim_no_longer_counts_and_is_pruned(redis_flush):
    from workers import kv_index

    workers = _workers()
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    chosen = _route(workers, NEW, replica="gw-a").candidates[0].name
    pending = kv_index.pending_key(chosen)
    fields = redis_flush.hkeys(pending)
    redis_flush.hset(pending, mapping=dict.fromkeys(fields, "1"))  # expired long ago
    assert _route(workers, NEW, replica="gw-b").available_tokens == 0
    redis_flush.hset("cp:kv:p:w9", mapping={"1": "1", "2": "1", "3": str(time.time() + 60)})
    assert kv_index.prune_pending(redis_flush, workers=["w9"]) == 2
    assert redis_flush.hkeys("cp:kv:p:w9") == [b"3"]


def test_a_routing_decision_reserves_a_slot_until_the_request_is_counted(redis_flush):
    import asyncio

    from gateway import routing
    from workers import kv_index, load_state

    workers = _workers()
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    chosen = _route(workers, NEW, replica="gw-a").candidates[0].name
    reserved = load_state.reserved_key(chosen)
    assert redis_flush.zcard(reserved) == 1  # another replica counts it at once
    # Sending it publishes this replica's +1 and drops the reservation in one pipeline.
    asyncio.run(_publish(routing, chosen))
    assert redis_flush.zcard(reserved) == 0
    assert redis_flush.hget(load_state.INFLIGHT_KEY, f"gw-a|{chosen}") == b"1"


def test_a_request_sent_and_finished_within_the_publish_window_still_drops_its_reservation(
    redis_flush,
):
    """Load changes are published together every few milliseconds: a request that was
    sent and finished in between nets to 0 in flight, and its reservation still goes."""
    import asyncio

    from gateway.directory import Directory
    from workers import kv_index, load_state

    workers = _workers()
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    chosen = _route(workers, NEW, replica="gw-a").candidates[0].name
    reserved = load_state.reserved_key(chosen)
    assert redis_flush.zcard(reserved) == 1
    local = Directory(replica="gw-a")

    async def send_and_finish() -> None:
        local.acquire(chosen)
        local.release(chosen)
        await local.loads_published()

    asyncio.run(send_and_finish())
    assert redis_flush.zcard(reserved) == 0
    assert redis_flush.hget(load_state.INFLIGHT_KEY, f"gw-a|{chosen}") == b"0"
    assert redis_flush.hexists(load_state.BEAT_KEY, "gw-a")  # the replica is alive


async def _publish(routing, worker: str) -> None:
    await routing.publish_loads(replica="gw-a", changes={worker: (+1, 1)})


@pytest.mark.parametrize("raw", ["abc", "-0.5"])
def test_a_malformed_holder_bound_stops_the_gateway_naming_the_variable(raw) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "CACHEPLANE_ROUTING_HOLDER_EPSILON": raw}
    run = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); import gateway.routing"],
        env={**env, "DJANGO_SETTINGS_MODULE": "controlplane.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "CACHEPLANE_ROUTING_HOLDER_EPSILON:" in run.stderr.splitlines()[-1]


# --- the balance bound: each worker's share of recent requests, shared by every replica --


def test_a_hot_prefix_is_replicated_once_its_holder_reaches_the_balance_bound(redis_flush):
    from gateway.routing import exact
    from workers import kv_index

    workers = _workers()
    _hold(redis_flush, "w2", BODY)
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    chosen = [_route(workers, BODY, replica=f"gw-{n % 4}").candidates[0].name for n in range(40)]
    counts = {w.name: chosen.count(w.name) for w in workers}
    # The holder keeps the prefix until its share reaches c x the mean (with the prior of
    # LOAD_PRIOR requests, about 17 of 40 at c = 1.25); the spill goes to one more worker,
    # whose claim makes it a holder, so later spills find the prefix there too.
    prior = exact.LOAD_PRIOR
    bound = exact.BALANCE * (40 / 4 + prior) - prior + 1
    assert chosen[0] == "w2" and counts["w2"] == max(counts.values())
    assert max(counts.values()) <= bound
    assert sum(1 for c in counts.values() if c) >= 2
    later = _route(workers, BODY, replica="gw-x")
    assert len(later.holders) >= 2 and later.routed_tokens == later.available_tokens


def test_a_new_prompt_goes_to_the_worker_with_the_fewest_recent_requests(redis_flush):
    from workers import kv_index, load_state

    workers = _workers()
    kv_index.mark_live(redis_flush, workers=[w.name for w in workers])
    # Counts another replica's decisions left (count, decision number), all current.
    redis_flush.set(load_state.DECISIONS_KEY, 30)
    redis_flush.hset(
        load_state.RATE_KEY,
        mapping={"w0": "10 30", "w1": "9 30", "w2": "1 30", "w3": "10 30"},
    )
    decision = _route(workers, NEW, replica="gw-a")
    assert decision.mode == "exact" and decision.candidates[0].name == "w2"
    assert redis_flush.get(load_state.DECISIONS_KEY) == b"31"
    count, seq = redis_flush.hget(load_state.RATE_KEY, "w2").split()
    assert float(count) == pytest.approx(1 * (1 - 1 / 4096) + 1) and seq == b"31"
