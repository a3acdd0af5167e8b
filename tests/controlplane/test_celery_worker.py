"""A real Celery worker consuming from the real Redis broker (not eager mode)."""

from __future__ import annotations

import socket

import pytest
from celery.contrib.testing.worker import start_worker

from controlplane import ops
from controlplane.celery import app
from controlplane.request_context import reset_request_id, set_request_id
from controlplane.tasks import worker_heartbeat_task


@pytest.fixture(scope="module")
def celery_worker():
    # The worker runs in a thread of this process but consumes over the Redis broker:
    # the message really goes through Redis and back.
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10) as worker:
        yield worker


def test_configuration_follows_the_reliability_rules() -> None:
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_reject_on_worker_lost is True
    assert conf.task_time_limit > conf.task_soft_time_limit
    assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit
    assert "controlplane-worker-heartbeat" in conf.beat_schedule


def test_worker_consumes_heartbeat_task_through_redis(redis_flush, celery_worker) -> None:
    key = f"{ops.HEARTBEAT_KEY_PREFIX}{socket.gethostname()}"
    assert redis_flush.get(key) is None
    token = set_request_id("req-celery-0001")
    try:
        result = worker_heartbeat_task.apply_async()
    finally:
        reset_request_id(token)
    # Wait on the worker's own completion signal, bounded; no sleep-as-work.
    import time

    deadline = time.monotonic() + 20
    while redis_flush.get(key) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_flush.get(key) is not None, f"task {result.id} was not consumed"


def test_running_the_heartbeat_twice_is_a_noop_beyond_refreshing(redis_flush) -> None:
    first = ops.worker_heartbeat_record()
    second = ops.worker_heartbeat_record()
    assert first == second
    assert len(list(redis_flush.scan_iter(match=f"{ops.HEARTBEAT_KEY_PREFIX}*"))) == 1
