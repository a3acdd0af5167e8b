"""Worker choice: the prefix index's holders and the bounded-load order (no I/O)."""

from __future__ import annotations

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
