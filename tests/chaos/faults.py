"""Pieces of the fault-under-load tests: a reference worker and a prefork Celery worker
as processes that can be killed, the client load, and the books read after a fault.

The load is what real clients do: gateway requests (plain and streamed) and REST calls
(cache creates with an Idempotency-Key, budget PATCHes), each retried by the client only
where a client would (REST through outages; a gateway request is answered or not). Every
answer is remembered with its start time, so a fault's recovery time is measured from the
client's side: the first request started after the fault that both planes answered.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from controlplane.embedded import free_port
from tests.caches.conftest import big_content
from tests.caches.processes import REPO, stop_process, wait_for
from tests.chaos.stack import ChaosStack

MODEL = "test/ref-tiny"
#: Enough for one create to be in flight when the Celery child dies; each more would
#: only queue behind the beat's tasks on the busy machine.
CREATES_PER_FAULT = 3
# The tiny model of tests/workers/engine/support.py, as command-line flags.
TINY_FLAGS = (
    "--num-layers=2 --hidden-size=64 --num-heads=4 --num-kv-heads=2 --head-dim=16 "
    "--intermediate-size=128 --max-position-embeddings=1024 --kv-cache-memory=2M "
    "--max-model-len=512 --enable-prompt-tokens-details --num-threads=1"
).split()


class RefWorker:
    """``cacheplane worker`` as its own process on a fixed port (restarted on the same)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = (self.root / "refworker.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workers.engine.cli", "--model", MODEL, "--port"]
            + [str(self.port), "--uvicorn-log-level", "warning", *TINY_FLAGS],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def answers() -> bool:
            assert self.process is not None and self.process.poll() is None, "worker exited"
            try:
                return httpx.get(f"{self.base_url}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, 90, "the reference worker")

    def kill(self) -> None:
        """Freeze it (so the streams in flight stay mid-stream), then kill -9."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process)


def start_prefork_worker(stack: ChaosStack, name: str) -> subprocess.Popen:
    """A Celery worker with the production pool (prefork, one child): the child runs the
    tasks, so kill -9 of the child is a task dying under a live parent."""
    log = (stack.root / f"{name}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--pool", "prefork"]
        + ["--concurrency", "1", "--hostname", f"{name}@test", "--without-heartbeat"]
        + ["--without-mingle", "--without-gossip", "--loglevel", "INFO"],
        cwd=REPO,
        env=stack.env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def faults_queue_length(stack: ChaosStack) -> int:
    """Messages waiting on the stack's Celery queue."""
    assert stack.redis is not None
    client = redis.Redis.from_url(stack.redis.url, socket_timeout=2)
    try:
        return int(client.llen(os.environ.get("CACHEPLANE_TASK_QUEUE", "cacheplane")))
    finally:
        client.close()


def pool_children(parent: int) -> list[int]:
    """The pids of ``parent``'s child processes (Linux /proc)."""
    path = Path(f"/proc/{parent}/task/{parent}/children")
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


@dataclass
class Answer:
    request_id: str
    plane: str  # "gateway" or "rest"
    started: float
    ok: bool
    cut: bool = False  # a stream answered 200 whose body broke off


@dataclass
class Load:
    """Client threads for one fault; ``answers`` is what every client saw."""

    stack: ChaosStack
    phase: str
    answers: list[Answer] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    accepted_caches: list[str] = field(default_factory=list)
    patched_limits: list[int] = field(default_factory=list)
    in_stream: set[str] = field(default_factory=set)  # streams past their second event
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, *, plain: int = 2, streams: int = 2, creates: bool = True) -> None:
        targets: list[tuple[Any, tuple[Any, ...]]] = [(self._plain, (n,)) for n in range(plain)]
        targets += [(self._stream, (n,)) for n in range(streams)]
        targets.append((self._patch_budget, ()))
        if creates:
            targets.append((self._create_caches, ()))
        for target, args in targets:
            self.threads.append(threading.Thread(target=target, args=args, daemon=True))
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    # --- what the fault reads ------------------------------------------------------------

    def first_ok_after(self, since: float, plane: str) -> float | None:
        times = [a.started for a in list(self.answers) if a.plane == plane and a.ok]
        later = [t for t in times if t >= since]
        return min(later) if later else None

    def oks_after(self, since: float) -> int:
        return sum(a.ok and a.started >= since for a in list(self.answers))

    def cut_streams(self) -> int:
        return sum(a.cut for a in list(self.answers))

    def gateway_ids(self, *, answered: bool) -> set[str]:
        """Gateway requests answered 200 (whole or cut off) or not."""
        return {
            a.request_id
            for a in self.answers
            if a.plane == "gateway" and (a.ok or a.cut) == answered
        }

    # --- clients -----------------------------------------------------------------------

    def _gateway_headers(self, request_id: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.stack.seed['gateway_key']}",
            "x-request-id": request_id,
        }

    def _plain(self, n: int) -> None:
        sent = 0
        while not self.stop.is_set():
            request_id = f"fault-{self.phase}-p{n}-{sent}"
            sent += 1
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"hi {sent}"}]}
            started = time.monotonic()
            try:
                response = httpx.post(
                    f"{self.stack.web_url}/v1/chat/completions",
                    json={**body, "max_tokens": 4},
                    headers=self._gateway_headers(request_id),
                    timeout=20,
                )
            except httpx.HTTPError as exc:
                self._answer(request_id, "gateway", started, False, f"gw {type(exc).__name__}")
                time.sleep(0.1)  # a client's back-off before its next request
                continue
            ok = response.status_code == 200
            self._answer(request_id, "gateway", started, ok, f"gw {response.status_code}")
            if not ok:
                time.sleep(0.1)  # a client's back-off before its next request

    def _stream(self, n: int) -> None:
        sent = 0
        while not self.stop.is_set():
            request_id = f"fault-{self.phase}-s{n}-{sent}"
            sent += 1
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"tell me {sent}"}],
                "max_tokens": 300,
                "stream": True,
            }
            started, status, events, done = time.monotonic(), 0, 0, False
            try:
                with httpx.stream(
                    "POST",
                    f"{self.stack.web_url}/v1/chat/completions",
                    json=body,
                    headers=self._gateway_headers(request_id),
                    timeout=20,
                ) as response:
                    status = response.status_code
                    for line in response.iter_lines():
                        events += line.startswith("data: {")
                        done = done or line.startswith("data: [DONE]")
                        if events == 2:
                            self.in_stream.add(request_id)
            except httpx.HTTPError as exc:
                self.statuses[f"stream {type(exc).__name__}"] += 1
            finally:
                self.in_stream.discard(request_id)
            ok = status == 200 and done
            cut = status == 200 and not done
            self._answer(request_id, "gateway", started, ok, f"stream {status}", cut=cut)
            if not ok:
                time.sleep(0.1)  # a client's back-off before its next request

    def _rest(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        """One REST call retried through outages (errors, 5xx) until a definite answer."""
        headers = {"Authorization": f"Bearer {self.stack.seed['rest_key']}"}
        headers.update(kwargs.pop("headers", {}))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                response = httpx.request(
                    method, f"{self.stack.web_url}{path}", headers=headers, timeout=15, **kwargs
                )
            except httpx.HTTPError as exc:
                self._answer(path, "rest", started, False, f"rest {type(exc).__name__}")
            else:
                ok = response.status_code < 500
                self._answer(path, "rest", started, ok, f"rest {response.status_code}")
                if ok:
                    return response
            time.sleep(0.2)  # a client's back-off between retries
        return None

    def _patch_budget(self) -> None:
        path = f"/api/v1/tenants/{self.stack.seed['tenant']}/budgets/{self.stack.seed['budget_id']}"
        n = 0
        while not self.stop.is_set():
            n += 1
            limit = 10**12 + n
            answer = self._rest("PATCH", path, json={"limit_micros": limit})
            if answer is not None and answer.status_code == 200:
                self.patched_limits.append(limit)
            self.stop.wait(0.3)  # an operator's pace, not a tight loop

    def _create_caches(self) -> None:
        base = f"/api/v1/tenants/{self.stack.seed['tenant']}/caches"
        n = 0
        while not self.stop.is_set() and n < CREATES_PER_FAULT:
            n += 1
            body = {
                "name": f"{self.phase}-{n}",
                "provider": "vertex",
                "model": "gemini-2.5-flash",
                "content": big_content(f"{self.phase}{n}", words=300),
                "ttl_seconds": 600,
            }
            key = {"Idempotency-Key": f"fault-{self.phase}-create-{n}"}
            created = self._rest("POST", base, json=body, headers=key)
            if created is not None and created.status_code in (200, 202):
                self.accepted_caches.append(created.json()["cache"])
            self.stop.wait(1)  # a client's pace between creates

    def _answer(
        self, request_id: str, plane: str, started: float, ok: bool, status: str, *, cut=False
    ) -> None:
        self.answers.append(Answer(request_id, plane, started, ok, cut))
        self.statuses[status] += 1


TRANSITIONAL = ("pending", "creating", "refreshing", "evicting")


@dataclass
class Books:
    """What the databases hold about one fault's traffic once the stack settled."""

    ledger: Counter[str]
    charged: set[str]
    open_ops: int
    stuck_caches: int
    inactive_accepted: int
    redis_holds: int
    pg_holds: int
    settle_backlog: int
    pg_spent: int
    redis_spent: int
    booked_actual: int
    budget_limit: int

    @classmethod
    def read(cls, stack: ChaosStack, load: Load) -> Books:
        like = f"fault-{load.phase}-%"
        ledger = Counter(
            {
                r: c
                for r, c in stack.query(
                    # The client's id (the ledger key is the gateway's own).
                    "SELECT client_request_id, count(*) FROM billing_usagerecord "
                    "WHERE client_request_id LIKE %s GROUP BY 1",
                    (like,),
                )
            }
        )
        charged = {
            r
            for (r,) in stack.query(
                "SELECT client_request_id FROM billing_usagerecord "
                "WHERE client_request_id LIKE %s AND cost_nanos > 0",
                (like,),
            )
        }
        open_ops = stack.query(
            "SELECT count(*) FROM caches_cacheoperation WHERE status IN ('pending', 'running')"
        )[0][0]
        states = dict(stack.query("SELECT id::text, state FROM caches_cacheobject"))
        period_id, pg_spent, pg_reserved, limit = stack.query(
            "SELECT id, spent_nanos, reserved_micros, limit_micros FROM billing_budgetperiod "
            "WHERE budget_id = %s",
            (stack.seed["budget_id"],),
        )[0]
        pg_holds = stack.query(
            "SELECT count(*) FROM billing_budgetreservation WHERE state = 'held' "
            "AND kind = 'request'"
        )[0][0]
        # Spend follows the ledger: Σ ledger of the budget's principal in the period
        # (a principal's budget counts its own rows, no storage; tests/billing/ledger_support).
        booked = stack.query(
            "SELECT coalesce(sum(u.cost_nanos), 0) FROM billing_usagerecord u, "
            "billing_budgetperiod p, billing_budget b WHERE p.id = %s AND b.id = p.budget_id "
            "AND u.tenant_id = p.tenant_id AND u.principal_id = b.principal_id "
            "AND u.occurred_at >= p.period_start AND u.occurred_at < p.period_end",
            (period_id,),
        )[0][0]
        assert stack.redis is not None
        client = redis.Redis.from_url(stack.redis.url)
        try:
            prefix = "cacheplane:budget"  # the default CACHEPLANE_BUDGET_REDIS_PREFIX
            live = client.hgetall(f"{prefix}:{period_id}")
            holds = int(client.zcard(f"{prefix}:{period_id}:holds")) + int(
                live.get(b"reserved", b"0")
            )
            backlog = int(client.llen(f"{prefix}:settle")) + int(
                client.zcard(f"{prefix}:settle:claims")
            )
            redis_spent = int(live.get(b"spent_nanos", b"0"))
        finally:
            client.close()
        return cls(
            ledger=ledger,
            charged=charged,
            open_ops=open_ops,
            stuck_caches=sum(state in TRANSITIONAL for state in states.values()),
            inactive_accepted=sum(states.get(c) != "active" for c in load.accepted_caches),
            redis_holds=holds,
            pg_holds=pg_holds + int(pg_reserved != 0),
            settle_backlog=backlog,
            pg_spent=pg_spent,
            redis_spent=redis_spent,
            booked_actual=booked,
            budget_limit=limit,
        )

    def lost(self, load: Load) -> set[str]:
        return load.gateway_ids(answered=True) - set(self.ledger)

    def doubled(self, load: Load) -> int:
        """Rows booked twice, requests charged that no client saw answered, and money
        charged twice (the budget's spend against the settled holds)."""
        twice = sum(count - 1 for count in self.ledger.values())
        phantom = len(self.charged - load.gateway_ids(answered=True))
        return twice + phantom + int(self.pg_spent != self.booked_actual)

    def settled(self, load: Load) -> bool:
        return (
            not self.lost(load)
            and self.open_ops == 0
            and self.redis_holds == 0
            and self.settle_backlog == 0
            and self.pg_spent == self.booked_actual == self.redis_spent
            and self.inactive_accepted == 0
        )


def settle(stack: ChaosStack, load: Load, timeout: float) -> tuple[Books, float]:
    """Read the books until they settle (or ``timeout``); the books and when."""
    books = Books.read(stack, load)
    deadline = time.monotonic() + timeout
    while not books.settled(load) and time.monotonic() < deadline:
        time.sleep(0.25)  # polling other processes' progress
        with contextlib.suppress(Exception):  # the stack's PostgreSQL may still be starting
            books = Books.read(stack, load)
    return books, time.monotonic()
