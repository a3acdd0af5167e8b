"""Budget edits and background settlement under traffic never deadlock (issue 29).

The mix of the independent concurrency run that found the deadlocks, against real
PostgreSQL (CI: the machine's server) with the real ``celery beat`` running the
deployment's schedule at its production intervals (storage sweeper every 15 s, the
gateway's hold flush every 5 s, usage flush, hold and reservation expiry) and two real
Celery workers, for two tenants at once:

- gateway clients (plain and streamed, through the Vertex emulator) whose settlements the
  flush books onto every tenant-wide budget, crossing thresholds (alerts) as it goes;
- a budget client per tenant creating budgets and PATCHing every one's limit just above
  its spend (so thresholds are crossed again and again) over REST;
- a cache client per tenant extending and evicting over REST;
- twelve caches per tenant with storage holds, expiring one after another during the
  run, so every sweep settles holds of both tenants;
- an operator correcting the gateway model's price and repricing the month.

PostgreSQL's deadlock counter for the test database must not move, no task may raise or
be retried, no request may answer 5xx; afterwards every gateway request answered 200 is
in the ledger exactly once, no hold is left open and every due cache is expired with
its hold settled.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import httpx
import pytest
from django.db import connections
from django.utils import timezone

from billing.models import BudgetPeriod, BudgetReservation, ModelPrice, UsageRecord
from billing.services.budget_reservations import budget_period_live
from billing.services.budgets import budget_create
from billing.services.prices import model_price_correct
from billing.services.reprice import usage_reprice
from caches.models import CacheObject, CacheState
from caches.services import lifecycle
from caches.services.execution import operation_execute
from controlplane.task_health import background_jobs_state
from tenants.services import keys
from tests.caches.conftest import big_content
from tests.caches.processes import (
    log_tail,
    start_celery_beat,
    start_celery_worker,
    stop_process,
    wait_for,
    wait_ready,
)
from tests.caches.test_concurrency import _deadlocks
from tests.factories import actor_for
from tests.gateway.support import price_vertex_output_only, price_vertex_storage

# e2e: two real Celery workers and the real beat for about 90 s (the CI step 50-e2e.sh).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FLASH = "gemini-2.5-flash"
#: The traffic runs this long: two sweeps and six flushes at the production intervals.
LOAD_SECONDS = 32
EXPIRING_PER_TENANT = 12
#: After the load, the next sweep and flush (15 s and 5 s apart) settle everything.
DRAIN_SECONDS = 60
#: What Celery logs when a task run raised or is being retried.
TASK_TROUBLE = ("raised unexpected", "Retry in", "deadlock detected")


class Load:
    """The client threads, what each was answered, and what the gateway accepted."""

    def __init__(self, base_url: str, tenants: list[dict]) -> None:
        self.base_url = base_url
        self.tenants = tenants
        self.stop = threading.Event()
        self.statuses: Counter[str] = Counter()
        self.gateway_ok: list[str] = []
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []

    def _call(self, client: httpx.Client, kind: str, method: str, path: str, **kw):
        response = client.request(method, f"{self.base_url}{path}", timeout=60, **kw)
        self.statuses[f"{kind} {response.status_code}"] += 1
        if response.status_code >= 500:
            self.errors.append(f"{kind} {method} {path}: {response.status_code} {response.text}")
        return response

    def _gateway(self, tenant: dict, n: int) -> None:
        headers = {"authorization": f"Bearer {tenant['gateway_key']}"}
        sent = 0
        with httpx.Client() as client:
            while not self.stop.is_set():
                sent += 1
                request_id = f"stress-{tenant['slug']}-{n}-{sent}"
                body = {
                    "model": FLASH,
                    "messages": [{"role": "user", "content": f"hello {n} {sent}"}],
                    "max_tokens": 8,
                    "stream": sent % 2 == 0,
                }
                response = self._call(
                    client,
                    "gateway",
                    "POST",
                    "/v1/chat/completions",
                    json=body,
                    headers={**headers, "x-request-id": request_id},
                )
                if response.status_code == 200 and (
                    not body["stream"] or "data: [DONE]" in response.text
                ):
                    self.gateway_ok.append(request_id)

    def _budgets(self, tenant: dict, n: int) -> None:
        base = f"/api/v1/tenants/{tenant['slug']}/budgets"
        headers = {"authorization": f"Bearer {tenant['rest_key']}"}
        created = 0
        with httpx.Client(headers=headers) as client:
            while not self.stop.is_set():
                if n == 0 and created < 4:
                    created += 1
                    body = {
                        "name": f"stress-{created}",
                        "period": "month",
                        "limit_micros": 60_000,
                        "hard_limit": False,
                        "thresholds": list(range(10, 101, 10)),
                    }
                    self._call(client, "budget create", "POST", base, json=body)
                listed = self._call(client, "budget list", "GET", base)
                for budget in listed.json()["results"] if listed.status_code == 200 else []:
                    spent = (budget["current_period"] or {}).get("spent_micros", 0)
                    # Just above the spend: the next settlements cross thresholds again.
                    for headroom in (60_000, 30_000):
                        self._call(
                            client,
                            "budget patch",
                            "PATCH",
                            f"{base}/{budget['id']}",
                            json={"limit_micros": spent + headroom},
                        )

    def _caches(self, tenant: dict) -> None:
        base = f"/api/v1/tenants/{tenant['slug']}/caches"
        headers = {"authorization": f"Bearer {tenant['rest_key']}"}
        keep, evict = tenant["kept_caches"]
        with httpx.Client(headers=headers) as client:
            self._call(client, "cache evict", "POST", f"{base}/{evict}/evict")
            while not self.stop.is_set():
                self._call(
                    client,
                    "cache extend",
                    "POST",
                    f"{base}/{keep}/extend",
                    json={"ttl_seconds": 7200},
                )
                self.stop.wait(2)  # a client's pace between extensions

    def _operator(self, actor) -> None:
        month_start = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        rate = 1000
        try:
            while not self.stop.is_set():
                rate = 2001 - rate  # 1000 <-> 1001 µ$ per output token
                price = ModelPrice.objects.get(
                    provider="vertex", model=FLASH, superseded_at__isnull=True
                )
                model_price_correct(
                    actor=actor,
                    price=price,
                    rates={"output_per_mtok": str(rate)},
                    source="stress test correction",
                )
                usage_reprice(actor=actor, since=month_start)
        except Exception as exc:  # reported by the test
            self.errors.append(f"operator: {type(exc).__name__}: {exc}")
        finally:
            connections.close_all()

    def start(self, operator_actor) -> None:
        for tenant in self.tenants:
            for n in range(2):
                self.threads.append(threading.Thread(target=self._gateway, args=(tenant, n)))
            for n in range(2):
                self.threads.append(threading.Thread(target=self._budgets, args=(tenant, n)))
            self.threads.append(threading.Thread(target=self._caches, args=(tenant,)))
        self.threads.append(threading.Thread(target=self._operator, args=(operator_actor,)))
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)


def _cache(tenant, admin, name: str, *, words: int = 1500) -> CacheObject:
    outcome = lifecycle.cache_create(
        tenant=tenant,
        actor=actor_for(admin),
        spec=lifecycle.CacheSpec(
            name=name,
            provider="vertex",
            model="gemini-2.5-pro",
            content=big_content(name, words=words),
            ttl_seconds=7200,
        ),
    )
    operation_execute(operation_id=str(outcome.operation.pk))
    return CacheObject.objects.all_tenants().get(pk=outcome.operation.cache_id)


def test_budget_edits_reprices_and_every_beat_under_traffic_never_deadlock_nor_fail_a_task(
    vertex, live_server_url, tenant_keys, platform_admin, redis_flush, tmp_path
) -> None:
    price_vertex_output_only(model=FLASH, output_per_mtok="1000")  # 1,000 µ$ per token
    price_vertex_storage(model="gemini-2.5-pro")
    tenants, due_by_tenant = [], []
    for slug, made in tenant_keys.items():
        tenant, admin = made["tenant"], made["admin"]
        budget_create(
            actor=actor_for(admin),
            tenant=tenant,
            name="base",
            period="month",
            limit_micros=10**9,
            hard_limit=False,
            thresholds=[50],
        )
        due_by_tenant.append(
            [_cache(tenant, admin, f"due-{n}") for n in range(EXPIRING_PER_TENANT)]
        )
        kept = [str(_cache(tenant, admin, name).pk) for name in ("keep", "evict")]
        rest_key = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="rest")
        tenants.append(
            {
                "slug": slug,
                "gateway_key": made["key"],
                "rest_key": rest_key.plaintext,
                "kept_caches": kept,
            }
        )
    # Interleaved: every sweep finds due caches of both tenants.
    expiring = [cache for pair in zip(*due_by_tenant, strict=True) for cache in pair]
    assert all(c.budget_reservation_id is not None for c in expiring)

    workers = [
        start_celery_worker(log_dir=tmp_path, name=f"beats{n}", vertex_base_url=vertex.base_url)
        for n in range(2)
    ]
    beat = start_celery_beat(log_dir=tmp_path)
    logs = [tmp_path / "beats0.log", tmp_path / "beats1.log", tmp_path / "beat.log"]
    load = Load(live_server_url, tenants)
    try:
        for worker, log in zip(workers, logs, strict=False):
            wait_ready(worker, log)
        # Two waves, each due at a sweep of the run (beat sweeps every 15 s).
        now = timezone.now()
        for n, cache in enumerate(expiring):
            CacheObject.objects.all_tenants().filter(pk=cache.pk).update(
                activated_at=now - timedelta(minutes=30),
                expire_at=now + timedelta(seconds=-1 if n % 2 else 14),
            )
        before = _deadlocks()
        started = time.monotonic()
        load.start(actor_for(platform_admin))
        load.stop.wait(LOAD_SECONDS)  # the load runs for a fixed time
        load.join()
        ids = [c.pk for c in expiring]

        def drained() -> bool:
            due_done = (
                CacheObject.objects.all_tenants()
                .filter(pk__in=ids)
                .exclude(state=CacheState.EXPIRED)
                .count()
                == 0
            )
            booked = UsageRecord.objects.all_tenants().filter(
                client_request_id__in=load.gateway_ok
            ).count() >= len(load.gateway_ok)
            return due_done and booked

        try:
            drain_s = wait_for(drained, DRAIN_SECONDS, "every due cache expired, all usage booked")
        except AssertionError as late:
            raise AssertionError(f"{late}\n" + "\n".join(log_tail(p) for p in logs)) from None
        # One more flush interval: settlements booked after the last request landed.
        wait_for(_settle_queue_empty, DRAIN_SECONDS, "the hold flush to drain")
    finally:
        load.stop.set()
        for process in (*workers, beat):
            stop_process(process)
    elapsed = time.monotonic() - started
    connections.close_all()
    after = _deadlocks()

    text = "".join(p.read_text(errors="replace") for p in logs)
    trouble = [line for line in text.splitlines() if any(t in line for t in TASK_TROUBLE)]
    ledger = Counter(
        UsageRecord.objects.all_tenants()
        .filter(client_request_id__in=load.gateway_ok)
        .values_list("client_request_id", flat=True)
    )
    doubled = sum(1 for n in ledger.values() if n > 1)
    lost = len(set(load.gateway_ok) - set(ledger))
    holds = BudgetReservation.objects.all_tenants().filter(
        pk__in=[c.budget_reservation_id for c in expiring]
    )
    open_holds = holds.exclude(state="settled").count()
    periods = list(BudgetPeriod.objects.all_tenants().all())
    open_redis = sum(budget_period_live(period_id=p.pk).get("reserved", 0) for p in periods)
    jobs = background_jobs_state()  # counted by the workers' task signals
    unhealthy = {
        name: state for name, state in jobs.items() if {"failures", "retries"} & state.keys()
    }
    sweeps = int(jobs["caches.tasks.cache_sweep_expired_task"].get("successes", 0))
    flushes = int(jobs["gateway.tasks.budget_settlements_flush_task"].get("successes", 0))
    failed = len(trouble) + len(unhealthy)
    print(
        f"RESULT deadlocks={after - before} failed_or_retried_tasks={failed} "
        f"server_errors={len(load.errors)} gateway_ok={len(load.gateway_ok)} lost={lost} "
        f"doubled={doubled} open_holds={open_holds} open_redis_micros={open_redis} "
        f"budgets={len({p.budget_id for p in periods})} sweeps={sweeps} flushes={flushes} "
        f"drain_s={drain_s:.1f} total_s={elapsed:.1f} statuses={dict(load.statuses)}"
    )
    assert after - before == 0, "\n".join(trouble[:20])
    assert trouble == [] and unhealthy == {}
    assert sweeps >= 2 and flushes >= 2
    assert load.errors == []
    assert load.gateway_ok and lost == 0 and doubled == 0
    assert open_holds == 0 and open_redis == 0
    assert load.statuses["budget patch 200"] > 0 and load.statuses["budget create 201"] > 0


def _settle_queue_empty() -> bool:
    from controlplane import ops
    from controlplane.redis import keys

    client = ops.redis_client()
    return (
        client.llen(keys.budget_settle_queue()) == 0
        and client.zcard(keys.budget_settle_claims()) == 0
    )
