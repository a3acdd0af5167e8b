"""Real Celery workers against Redis and PostgreSQL: the happy path and kill -9.

The worker processes are real (``celery -A controlplane worker``) and consume from the
real broker; the Vertex side is the emulator, reached over HTTP.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from caches.models import CacheObject, CacheOperation, CacheState, OperationStatus
from caches.services import lifecycle, reconcile
from tests.caches.conftest import big_content
from tests.factories import actor_for

REPO = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    db = connection.settings_dict
    host = (db["HOST"] or "127.0.0.1").replace("/", "%2F")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgresql://{db['USER']}{password}@{host}{port}/{db['NAME']}"


def _start_worker(vertex, tmp_path: Path, name: str) -> subprocess.Popen:
    from django.conf import settings

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        {
            "DATABASE_URL": _database_url(),
            "REDIS_URL": settings.REDIS_URL,
            "CACHEPLANE_VERTEX_BASE_URL": vertex.base_url,
            "CACHEPLANE_VERTEX_STATIC_TOKEN": "test-token",
            "CACHEPLANE_VERTEX_PROJECT": "p1",
            "CACHEPLANE_VERTEX_LOCATION": "us-central1",
            "CACHEPLANE_PROVIDER_RETRY_INITIAL_DELAY": "0.01",
            "CACHEPLANE_OPERATION_LEASE_SECONDS": "1",
            "CACHEPLANE_LOG_FORMAT": "console",
        }
    )
    log = (tmp_path / f"{name}.log").open("wb")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "--pool",
            "solo",
            "--hostname",
            f"{name}@test",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "INFO",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling another process's progress


def _stop(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_creates_the_cache_from_the_enqueued_task(
    vertex, tenant_a, admin_a, redis_flush, tmp_path
) -> None:
    worker = _start_worker(vertex, tmp_path, "happy")
    try:
        outcome = lifecycle.cache_create(
            tenant=tenant_a,
            actor=actor_for(admin_a),
            spec=lifecycle.CacheSpec(
                name="c",
                provider="vertex",
                model="gemini-2.5-flash",
                content=big_content(),
                ttl_seconds=600,
            ),
        )
        cache_id = outcome.operation.cache_id
        _wait(
            lambda: CacheObject.objects.all_tenants().get(pk=cache_id).state == CacheState.ACTIVE,
            60,
            "the worker to activate the cache",
        )
    finally:
        _stop(worker)
    assert len(vertex.stored_caches()) == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_kill_9_during_create_then_reconcile_leaves_exactly_one_remote_cache(
    vertex, tenant_a, admin_a, redis_flush, tmp_path, settings
) -> None:
    settings.CACHEPLANE_OPERATION_LEASE_SECONDS = 1
    vertex.set_reply_delay(10_000)  # the remote cache is made; the reply never arrives in time
    first = _start_worker(vertex, tmp_path, "doomed")
    second = None
    try:
        outcome = lifecycle.cache_create(
            tenant=tenant_a,
            actor=actor_for(admin_a),
            spec=lifecycle.CacheSpec(
                name="c",
                provider="vertex",
                model="gemini-2.5-flash",
                content=big_content(),
                ttl_seconds=600,
            ),
        )
        _wait(lambda: len(vertex.stored_caches()) == 1, 60, "the remote create")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        op = CacheOperation.objects.all_tenants().get(pk=outcome.operation.pk)
        assert op.status == OperationStatus.RUNNING
        assert CacheObject.objects.all_tenants().get(pk=op.cache_id).state == CacheState.CREATING

        vertex.set_reply_delay(0)
        second = _start_worker(vertex, tmp_path, "survivor")
        _wait(
            lambda: (
                CacheOperation.objects.all_tenants().get(pk=op.pk).lease_until
                < __import__("django.utils.timezone").utils.timezone.now()
            ),
            10,
            "the lease",
        )
        assert reconcile.operations_requeue_stuck() == 1
        _wait(
            lambda: (
                CacheObject.objects.all_tenants().get(pk=op.cache_id).state
                in (CacheState.ACTIVE, CacheState.FAILED)
            ),
            60,
            "a terminal state",
        )
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
    cache = CacheObject.objects.all_tenants().get(pk=op.cache_id)
    assert cache.state == CacheState.ACTIVE
    assert len(vertex.stored_caches()) == 1
    # The doomed worker's create never got its reply logged; the survivor adopted the
    # remote cache instead of sending a second create.
    assert vertex.create_requests() == []
    assert cache.remote_name == vertex.stored_caches()[0].name
