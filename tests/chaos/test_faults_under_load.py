"""Four faults under gateway and REST load, each measured on its own.

One stack for all four (``tests/chaos/stack.py``: its own embedded PostgreSQL and Redis,
never the session's servers; the ASGI app under uvicorn; a prefork Celery worker; a
reference worker process; the Vertex emulator). While clients send plain and streamed
gateway requests, create caches and PATCH the budget, each test breaks one piece:

- ``celery_child``: kill -9 of the Celery pool child in the middle of a cache create;
- ``redis``: Redis stopped and started again (broker, usage queue, budget holds);
- ``postgres``: PostgreSQL fast-stopped (transactions cut) and started again;
- ``worker``: kill -9 of the reference worker while streams are mid-flight, then restart.

After the fault the books must settle (beat compressed to every 2 s): every gateway
request a client saw answered 200 (streams cut off mid-way included: what was streamed is
booked) is in the usage ledger exactly once, nothing is charged that no client saw, the
budget's spend equals the settled holds in PostgreSQL and Redis, no hold is left open, no
operation is open, every accepted cache is active and the budget holds the last limit a
PATCH was acknowledged with. Each prints ``RESULT fault=... recovery_s=... settled_s=...``:
recovery is from the fault to the first request started after it that each plane
answered; settled is from the fault until the books above hold.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from caches.providers.vertex_emulator.launcher import running_vertex_emulator
from tests.caches.processes import stop_process, wait_for
from tests.chaos.faults import (
    MODEL,
    Load,
    RefWorker,
    faults_queue_length,
    pool_children,
    settle,
    start_prefork_worker,
)
from tests.chaos.stack import ChaosStack, chaos_root

pytestmark = pytest.mark.e2e

RECOVERY_BOUND_SECONDS = 60
BEAT = (
    "caches.tasks.cache_reconcile_task",
    "billing.tasks.usage_flush_task",
    "gateway.tasks.budget_settlements_flush_task",
    "gateway.tasks.budget_holds_expire_task",
    "workers.tasks.workers_probe_task",
)


@dataclass
class Faults:
    stack: ChaosStack
    vertex: object
    worker: RefWorker
    celery: subprocess.Popen


@pytest.fixture(scope="module")
def faults() -> Iterator[Faults]:
    with contextlib.ExitStack() as cleanup:
        root = cleanup.enter_context(chaos_root())
        vertex_url, vertex = cleanup.enter_context(running_vertex_emulator())
        worker = RefWorker(root)
        cleanup.callback(worker.stop)
        worker.start()
        stack = ChaosStack(root=root, vertex_base_url=vertex_url)
        cleanup.callback(stack.stop)
        stack.start(worker_url=worker.base_url, model=MODEL, seed_flags=("--budget",))
        celery = start_prefork_worker(stack, "prefork")
        cleanup.callback(stop_process, celery)
        log = root / "prefork.log"
        wait_for(lambda: b" ready." in log.read_bytes(), 180, "the Celery worker")
        stop = threading.Event()
        threading.Thread(target=_beat, args=(stack, stop), daemon=True).start()
        cleanup.callback(stop.set)
        yield Faults(stack=stack, vertex=vertex, worker=worker, celery=celery)


def _beat(stack: ChaosStack, stop: threading.Event) -> None:
    """What celery beat does for this stack, compressed to every 2 s. A tick is skipped
    while the queue still holds work: one pool child on a busy 2-core machine runs
    these slower than every 2 s, and a growing backlog would starve the cache creates."""
    while not stop.wait(2):
        # Beat itself fails to enqueue while Redis is down, and tries again next tick.
        with contextlib.suppress(Exception):
            if faults_queue_length(stack) == 0:
                for task in BEAT:
                    stack.send_task(task)


def _run(faults: Faults, phase: str, inject: Callable[[Load], float]) -> Load:
    """Load, ``inject`` (returns the fault's time), recovery, settling, the assertions."""
    load = Load(faults.stack, phase)
    load.start(plain=2, streams=1)
    try:
        wait_for(
            lambda: bool(load.first_ok_after(0, "gateway") and load.first_ok_after(0, "rest")),
            RECOVERY_BOUND_SECONDS,
            "load before the fault",
        )
        fault_at = inject(load)

        def both_planes() -> bool:
            return bool(
                load.first_ok_after(fault_at, "gateway") and load.first_ok_after(fault_at, "rest")
            )

        wait_for(both_planes, RECOVERY_BOUND_SECONDS, f"service after the {phase} fault")
        recovery_s = max(load.first_ok_after(fault_at, p) or 0 for p in ("gateway", "rest"))
        recovery_s -= fault_at
        served = load.oks_after(fault_at)
        wait_for(lambda: load.oks_after(fault_at) >= served + 6, 30, "load after recovery")
    finally:
        load.finish()
    books, settled_at = settle(faults.stack, load, RECOVERY_BOUND_SECONDS)
    answered = load.gateway_ids(answered=True)
    lost, doubled = books.lost(load), books.doubled(load)
    stuck, holds = books.open_ops + books.stuck_caches, books.redis_holds + books.pg_holds
    print(
        f"RESULT fault={phase} gateway_ok={len(answered)} cut_streams={load.cut_streams()} "
        f"ledger_rows={sum(books.ledger.values())} lost={len(lost)} doubled={doubled} "
        f"stuck={stuck} open_holds={holds} "
        f"creates={len(load.accepted_caches)} patches={len(load.patched_limits)} "
        f"recovery_s={recovery_s:.1f} settled_s={settled_at - fault_at:.1f} "
        f"statuses={dict(load.statuses)}"
    )
    assert answered and load.accepted_caches and load.patched_limits
    assert lost == set(), f"answered 200 but not in the ledger: {sorted(lost)[:5]}"
    assert doubled == 0, books
    assert books.open_ops == 0 and books.stuck_caches == 0 and books.inactive_accepted == 0
    assert books.redis_holds == 0 and books.pg_holds == 0 and books.settle_backlog == 0, books
    assert books.pg_spent == books.booked_actual == books.redis_spent, books
    assert books.budget_limit == load.patched_limits[-1]
    return load


def test_kill_9_of_a_celery_pool_child_mid_create(faults: Faults) -> None:
    def inject(load: Load) -> float:
        faults.vertex.set_reply_delay(1500)  # type: ignore[attr-defined]
        try:
            wait_for(
                lambda: bool(
                    faults.stack.query(
                        "SELECT 1 FROM caches_cacheoperation WHERE status = 'running'"
                    )
                ),
                RECOVERY_BOUND_SECONDS,
                "a cache create in flight",
            )
            (child,) = pool_children(faults.celery.pid)
            os.kill(child, signal.SIGKILL)
            return time.monotonic()
        finally:
            faults.vertex.set_reply_delay(0)  # type: ignore[attr-defined]

    _run(faults, "celery_child", inject)
    assert faults.celery.poll() is None, "the worker's parent survives its child"


def test_redis_restart_under_load(faults: Faults) -> None:
    def inject(load: Load) -> float:
        at = time.monotonic()
        faults.stack.restart_redis()
        return at

    _run(faults, "redis", inject)


def test_postgres_restart_under_load(faults: Faults) -> None:
    def inject(load: Load) -> float:
        at = time.monotonic()
        faults.stack.restart_postgres()
        return at

    _run(faults, "postgres", inject)


def test_reference_worker_killed_mid_stream(faults: Faults) -> None:
    def inject(load: Load) -> float:
        wait_for(lambda: bool(load.in_stream), RECOVERY_BOUND_SECONDS, "a stream mid-flight")
        faults.worker.kill()
        at = time.monotonic()
        faults.worker.start()
        print(f"RESULT fault=worker boot_s={time.monotonic() - at:.1f}")
        return at

    load = _run(faults, "worker", inject)
    assert load.cut_streams() >= 1, "the kill landed mid-stream"
