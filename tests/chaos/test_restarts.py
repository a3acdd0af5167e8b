"""Chaos with real processes: kill -9 a Celery worker, restart PostgreSQL and Redis.

While cache creates, TTL extensions (refreshes) and gateway traffic are in flight, the
test kills the Celery worker running an operation, restarts Redis (broker and usage
queue) and then PostgreSQL. Clients retry what failed as real clients do (creates with
their Idempotency-Key). With the periodic jobs beat would run (reconcile,
usage flush, compressed to every 2 s), the stack must converge within ``RECOVERY_BOUND_SECONDS`` to:

- 0 lost intents: every accepted create is an active cache, every accepted extension a
  succeeded operation;
- 0 stuck rows: no operation pending/running, no cache in a transitional state;
- 0 duplicate remote caches: one Vertex emulator cache per cache row, none orphaned;
- 0 lost usage records: every gateway request answered 200 is in the usage ledger.

It runs on its own embedded PostgreSQL and Redis (``tests/chaos/stack.py``), never the
session's servers.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from caches.providers.vertex_emulator.launcher import running_vertex_emulator
from tests.caches.conftest import big_content
from tests.caches.processes import wait_for
from tests.chaos.stack import ChaosStack, chaos_root
from tests.workers.engine.support import tiny_config
from workers.engine.launcher import serve

pytestmark = pytest.mark.e2e

MODEL = "test/ref-tiny"
CREATES = 8
RECOVERY_BOUND_SECONDS = 90
TRANSITIONAL = ("pending", "creating", "refreshing", "evicting")


class Traffic:
    """Client threads that retry what failed, and remember what was accepted."""

    def __init__(self, stack: ChaosStack) -> None:
        self.stack = stack
        self.stop = threading.Event()
        self.accepted_caches: list[str] = []
        self.accepted_extends: list[str] = []
        self.gateway_ok: list[str] = []
        self.statuses: Counter[str] = Counter()
        self.threads: list[threading.Thread] = []

    def _rest(self, method: str, path: str, **kwargs) -> httpx.Response | None:
        headers = {"Authorization": f"Bearer {self.stack.seed['rest_key']}"}
        headers.update(kwargs.pop("headers", {}))
        try:
            response = httpx.request(
                method, f"{self.stack.web_url}{path}", headers=headers, timeout=15, **kwargs
            )
        except httpx.HTTPError as exc:
            self.statuses[type(exc).__name__] += 1
            return None
        self.statuses[f"rest {response.status_code}"] += 1
        return response

    def _until_answered(self, method: str, path: str, **kwargs) -> httpx.Response | None:
        """Retry through outages (connection errors, 5xx) until a definite answer."""
        deadline = time.monotonic() + RECOVERY_BOUND_SECONDS
        while time.monotonic() < deadline:
            response = self._rest(method, path, **kwargs)
            if response is not None and response.status_code < 500:
                return response
            time.sleep(0.2)  # a client's back-off between retries
        return None

    def _cache_client(self, n: int) -> None:
        base = f"/api/v1/tenants/{self.stack.seed['tenant']}/caches"
        body = {
            "name": f"chaos-{n}",
            "provider": "vertex",
            "model": "gemini-2.5-flash",
            "content": big_content(f"chaos{n}", words=300),
            "ttl_seconds": 600,
        }
        created = self._until_answered(
            "POST", base, json=body, headers={"Idempotency-Key": f"chaos-create-{n}"}
        )
        if created is None or created.status_code not in (200, 202):
            return
        cache_id = created.json()["cache"]
        self.accepted_caches.append(cache_id)

        def active() -> bool:
            time.sleep(0.5)  # a client's polling interval (keeps the web server free)
            got = self._rest("GET", f"{base}/{cache_id}")
            return got is not None and got.status_code == 200 and got.json()["state"] == "active"

        with contextlib.suppress(AssertionError):
            wait_for(active, RECOVERY_BOUND_SECONDS, "the cache to be active")
            extended = self._until_answered(
                "POST", f"{base}/{cache_id}/extend", json={"ttl_seconds": 900}
            )
            if extended is not None and extended.status_code == 202:
                self.accepted_extends.append(extended.json()["id"])

    def _gateway_client(self, n: int) -> None:
        headers = {"Authorization": f"Bearer {self.stack.seed['gateway_key']}"}
        sent = 0
        while not self.stop.is_set():
            request_id = f"chaos-gw-{n}-{sent}"
            sent += 1
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"hello {n} {sent}"}],
                "max_tokens": 2,
            }
            try:
                response = httpx.post(
                    f"{self.stack.web_url}/v1/chat/completions",
                    json=body,
                    headers={**headers, "x-request-id": request_id},
                    timeout=15,
                )
            except httpx.HTTPError as exc:
                self.statuses[f"gateway {type(exc).__name__}"] += 1
                time.sleep(0.1)  # a client's back-off between retries
                continue
            self.statuses[f"gateway {response.status_code}"] += 1
            if response.status_code == 200:
                self.gateway_ok.append(request_id)

    def start(self) -> None:
        for n in range(CREATES):
            self.threads.append(threading.Thread(target=self._cache_client, args=(n,)))
        for n in range(2):
            self.threads.append(threading.Thread(target=self._gateway_client, args=(n,)))
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        for thread in self.threads[:CREATES]:
            thread.join(timeout=RECOVERY_BOUND_SECONDS * 2)
        self.stop.set()
        for thread in self.threads[CREATES:]:
            thread.join(timeout=30)


@pytest.fixture
def stack_root():
    with chaos_root() as root:
        yield root


def test_kill_9_and_restarts_under_load_lose_nothing_and_leave_nothing_stuck(
    stack_root: Path,
) -> None:
    started = time.monotonic()
    with (
        running_vertex_emulator() as (vertex_url, vertex),
        serve(tiny_config(num_blocks=256, max_model_len=512)) as engine,
    ):
        stack = ChaosStack(root=stack_root, vertex_base_url=vertex_url)
        try:
            stack.start(worker_url=engine.base_url, model=MODEL)
            # Two workers, both booted before the clock starts (a cold start takes tens of
            # seconds on a busy machine); the kill then hits one in the middle of a create.
            for name in ("first", "second"):
                stack.start_worker(name)
            for name in ("first", "second"):
                log = stack.root / f"{name}.log"
                wait_for(lambda log=log: b" ready." in log.read_bytes(), 180, f"{name} ready")
            # Each create takes the emulator 1.5 s to answer: the kill lands mid-operation.
            vertex.set_reply_delay(1500)
            beat = Beat(stack)
            beat.thread.start()
            traffic = Traffic(stack)
            traffic.start()
            wait_for(
                lambda: bool(
                    stack.query("SELECT 1 FROM caches_cacheoperation WHERE status = 'running'")
                ),
                60,
                "an operation in flight",
            )
            stack.kill_worker("first")
            vertex.set_reply_delay(0)
            stack.restart_redis()
            wait_for(lambda: len(traffic.gateway_ok) >= 5, 60, "gateway traffic after Redis")
            stack.restart_postgres()
            traffic.join()
            chaos_done = time.monotonic()

            recovered_s = _converge(stack, traffic) - chaos_done
            beat.stop.set()
            caches = dict(stack.query("SELECT id::text, state FROM caches_cacheobject"))
            extends = dict(
                stack.query(
                    "SELECT id::text, status FROM caches_cacheoperation WHERE kind = 'refresh'"
                )
            )
            open_ops = stack.query(
                "SELECT count(*) FROM caches_cacheoperation WHERE status IN ('pending', 'running')"
            )[0][0]
            logged = {row[0] for row in stack.query(USAGE_IDS)}
        finally:
            stack.stop()
        remote = [c.display_name for c in vertex.stored_caches()]

    lost_creates = [c for c in traffic.accepted_caches if caches.get(c) != "active"]
    lost_extends = [op for op in traffic.accepted_extends if extends.get(op) != "succeeded"]
    stuck = [c for c, state in caches.items() if state in TRANSITIONAL]
    duplicates = len(remote) - len(set(remote))
    orphans = [name for name in remote if not any(name.endswith(c) for c in caches)]
    lost_usage = set(traffic.gateway_ok) - logged
    print(
        f"RESULT creates_accepted={len(traffic.accepted_caches)} "
        f"extends_accepted={len(traffic.accepted_extends)} gateway_ok={len(traffic.gateway_ok)} "
        f"lost_intents={len(lost_creates) + len(lost_extends)} stuck_rows={len(stuck) + open_ops} "
        f"remote_caches={len(remote)} duplicate_remote={duplicates} orphans={len(orphans)} "
        f"lost_usage={len(lost_usage)} recovered_s={recovered_s:.1f} "
        f"total_s={time.monotonic() - started:.1f} statuses={dict(traffic.statuses)}"
    )
    assert len(traffic.accepted_caches) == CREATES
    assert lost_creates == [] and lost_extends == []
    assert stuck == [] and open_ops == 0
    assert duplicates == 0 and orphans == []
    assert len(remote) == len(caches)
    assert traffic.gateway_ok and lost_usage == set()


# The client's ids (X-Request-Id) are kept as client_request_id; the ledger key is the
# gateway's own.
USAGE_IDS = (
    "SELECT client_request_id FROM billing_usagerecord WHERE client_request_id LIKE 'chaos-gw-%%'"
)


class Beat:
    """What celery beat does for this stack, compressed to every 2 s: reconcile (requeues
    operations whose lease lapsed, adopts remote caches) and the usage flush."""

    def __init__(self, stack: ChaosStack) -> None:
        self.stack = stack
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(2):
            # Beat itself fails to enqueue while Redis is down, and tries again next tick.
            with contextlib.suppress(Exception):
                self.stack.send_task("caches.tasks.cache_reconcile_task")
                self.stack.send_task("billing.tasks.usage_flush_task")


def _converge(stack: ChaosStack, traffic: Traffic) -> float:
    """Wait until nothing is open and all usage is in (bounded); the time it converged."""

    def converged() -> bool:
        open_ops = stack.query(
            "SELECT count(*) FROM caches_cacheoperation WHERE status IN ('pending', 'running')"
        )[0][0]
        logged = {row[0] for row in stack.query(USAGE_IDS)}
        return open_ops == 0 and set(traffic.gateway_ok) <= logged

    with contextlib.suppress(AssertionError):
        wait_for(converged, RECOVERY_BOUND_SECONDS, "convergence")
    return time.monotonic()
