"""Concurrent writes on one tenant never deadlock (the lock order of caches.services.locks).

Fifty REST requests at once on one tenant (creates, TTL extensions, evictions, IAM
policy replacements, budget changes, cache-salt rotations), each in its own thread with
its own PostgreSQL connection, while two real Celery workers run the cache operations
against the Vertex emulator. PostgreSQL's own deadlock counter must not move, no
request may answer 5xx, and every operation must reach a terminal status within
``TERMINAL_BOUND_SECONDS`` of its request (the bound documented in
docs/operations/lock-order-and-chaos.md).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections
from django.test import Client

from caches.models import CacheObject, CacheOperation, CacheState, OperationStatus
from caches.services import lifecycle
from caches.services.execution import operation_execute
from tenants.services import keys
from tests.caches.conftest import big_content
from tests.caches.processes import log_tail, start_celery_worker, stop_process, wait_for, wait_ready
from tests.factories import actor_for

#: Every operation is terminal this long after its request at most
#: (docs/operations/lock-order-and-chaos.md).
TERMINAL_BOUND_SECONDS = 60
TRANSITIONAL = (CacheState.PENDING, CacheState.CREATING, CacheState.REFRESHING)


def _deadlocks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def _describe(operations) -> str:
    """The open operations, for a failure message: what each was doing and why."""
    return "; ".join(
        f"{op.kind} {op.status} attempts={op.attempts} lease_until={op.lease_until} "
        f"error={op.error_code or '-'} {op.error[:200]}"
        for op in operations
    )


def _request(method: str, path: str, key: str, body: dict | None = None) -> int:
    """One REST call in this thread (its own connection, closed afterwards)."""
    client = Client(raise_request_exception=False)
    try:
        response = client.generic(
            method,
            path,
            json.dumps(body) if body is not None else "",
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        return response.status_code
    finally:
        connections.close_all()


def _policy_replace(base: str, key: str) -> int:
    client = Client(raise_request_exception=False)
    try:
        policy = client.get(f"{base}/iam-policy", HTTP_AUTHORIZATION=f"Bearer {key}").json()
        bindings = [
            {"role": b["role"], "principal": b["principal"], "expires_at": b["expires_at"]}
            for b in policy["bindings"]
        ]
        response = client.put(
            f"{base}/iam-policy",
            json.dumps({"etag": policy["etag"], "bindings": bindings}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        return response.status_code
    finally:
        connections.close_all()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_writes_on_one_tenant_never_deadlock_nor_5xx_nor_stick(
    vertex, tenant_a, admin_a, redis_flush, tmp_path
) -> None:
    actor = actor_for(admin_a)
    key = keys.api_key_create(actor=actor, tenant=tenant_a, name="stress").plaintext
    base = f"/api/v1/tenants/{tenant_a.slug}"
    active = []
    for n in range(10):
        outcome = lifecycle.cache_create(
            tenant=tenant_a,
            actor=actor,
            spec=lifecycle.CacheSpec(
                name=f"seed-{n}",
                provider="vertex",
                model="gemini-2.5-flash",
                content=big_content(f"seed{n}", words=300),
                ttl_seconds=3600,
            ),
        )
        operation_execute(operation_id=str(outcome.operation.pk))
        active.append(str(outcome.operation.cache_id))
    budget_status = _request(
        "POST", f"{base}/budgets", key, {"name": "b", "period": "month", "limit_micros": 10**12}
    )
    assert budget_status == 201
    budget_id = json.loads(
        Client().get(f"{base}/budgets", HTTP_AUTHORIZATION=f"Bearer {key}").content.decode()
    )["results"][0]["id"]

    jobs = []
    for n in range(20):
        body = {
            "name": f"new-{n}",
            "provider": "vertex",
            "model": "gemini-2.5-flash",
            "content": big_content(f"new{n}", words=300),
            "ttl_seconds": 600,
        }
        jobs.append(("POST", f"{base}/caches", body))
    jobs += [("POST", f"{base}/caches/{c}/extend", {"ttl_seconds": 900}) for c in active]
    jobs += [("POST", f"{base}/caches/{c}/evict", None) for c in active[5:]]
    jobs += [("POLICY", base, None)] * 8
    jobs += [
        ("PATCH", f"{base}/budgets/{budget_id}", {"limit_micros": 10**12 + n}) for n in range(4)
    ]
    jobs += [("POST", f"{base}/cache-salt/rotate", None)] * 3
    assert len(jobs) == 50
    # Interleave the kinds so every kind overlaps every other.
    jobs = [jobs[i] for i in sorted(range(50), key=lambda i: (i * 7) % 50)]

    workers = [
        start_celery_worker(log_dir=tmp_path, name=f"stress{n}", vertex_base_url=vertex.base_url)
        for n in range(2)
    ]
    for n, worker in enumerate(workers):
        wait_ready(worker, tmp_path / f"stress{n}.log")
    before = _deadlocks()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            statuses = list(
                pool.map(
                    lambda job: (
                        _policy_replace(job[1], key)
                        if job[0] == "POLICY"
                        else _request(job[0], job[1], key, job[2])
                    ),
                    jobs,
                )
            )
        open_ops = CacheOperation.objects.all_tenants().filter(
            tenant=tenant_a, status__in=[OperationStatus.PENDING, OperationStatus.RUNNING]
        )
        try:
            waited = wait_for(
                lambda: not open_ops.exists(), TERMINAL_BOUND_SECONDS, "every operation terminal"
            )
        except AssertionError as late:
            logs = "\n".join(log_tail(tmp_path / f"stress{n}.log") for n in range(2))
            raise AssertionError(
                f"{late}; still open: {_describe(open_ops)}\nworker logs:\n{logs}"
            ) from None
    finally:
        for worker in workers:
            stop_process(worker)
    elapsed = time.monotonic() - started
    connections.close_all()
    after = _deadlocks()

    server_errors = [s for s in statuses if s >= 500]
    ops = CacheOperation.objects.all_tenants().filter(tenant=tenant_a, created_at__isnull=False)
    slowest = max((op.finished_at - op.created_at).total_seconds() for op in ops)
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("stress*.log"))
    print(
        f"RESULT requests=50 deadlocks={after - before} server_errors={len(server_errors)} "
        f"statuses={sorted(set(statuses))} operations={ops.count()} "
        f"slowest_to_terminal_s={slowest:.2f} drain_s={waited:.2f} total_s={elapsed:.2f}"
    )
    assert after - before == 0
    assert "deadlock detected" not in logs
    assert server_errors == []
    assert slowest <= TERMINAL_BOUND_SECONDS
    assert (
        not CacheObject.objects.all_tenants()
        .filter(tenant=tenant_a, state__in=TRANSITIONAL)
        .exists()
    )
    assert (
        CacheObject.objects.all_tenants().filter(tenant=tenant_a, name__startswith="new-").count()
        == 20
    )
    assert (
        CacheObject.objects.all_tenants().filter(tenant=tenant_a, state=CacheState.EVICTED).count()
        == 5
    )
    assert len(vertex.stored_caches()) == 25  # 10 seeds + 20 new - 5 evicted, no duplicates
