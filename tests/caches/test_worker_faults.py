"""Real Celery workers against Redis and PostgreSQL: the happy path and kill -9.

The worker processes are real (``celery -A controlplane worker``) and consume from the
real broker; the Vertex side is the emulator, reached over HTTP.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from caches.models import CacheObject, CacheOperation, CacheState, OperationStatus
from caches.services import lifecycle, reconcile
from tests.caches.conftest import big_content
from tests.caches.processes import start_celery_worker, stop_process, wait_for
from tests.factories import actor_for


def _start_worker(vertex, tmp_path: Path, name: str):
    return start_celery_worker(
        log_dir=tmp_path,
        name=name,
        vertex_base_url=vertex.base_url,
        extra_env={"CACHEPLANE_OPERATION_LEASE_SECONDS": "1"},
    )


_wait = wait_for
_stop = stop_process


@pytest.mark.e2e
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


@pytest.mark.e2e
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
    # The survivor adopted the remote cache instead of sending a second create. The
    # emulator logs a request when its reply is written, so the doomed worker's create
    # shows up only if its delayed reply finished before this line (on a loaded machine).
    assert len(vertex.create_requests()) <= 1
    assert cache.remote_name == vertex.stored_caches()[0].name
