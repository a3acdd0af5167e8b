"""Background jobs fail loudly: lock-conflict retries are bounded and counted, and a
watched beat job that stops succeeding is an alert on the platform page."""

from __future__ import annotations

import time

import pytest
from celery import shared_task
from django.db import DatabaseError, connection
from django.test import Client
from prometheus_client import REGISTRY

from controlplane.task_health import (
    HEALTH_KEY_PREFIX,
    LOCK_CONFLICT_RETRY,
    LockConflict,
    background_jobs_overdue,
    background_jobs_state,
    lock_conflicts_retried,
)
from gateway.tasks import budget_settlements_flush_task

pytestmark = pytest.mark.django_db

FLUSH = "gateway.tasks.budget_settlements_flush_task"


def _raise_sqlstate(state: str) -> None:
    """A real PostgreSQL error carrying ``state`` (what a lost deadlock raises)."""
    with connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '{state}'; END $$")


@shared_task(name="tests.controlplane.always_deadlocked_task", **LOCK_CONFLICT_RETRY)
def always_deadlocked_task() -> None:
    with lock_conflicts_retried():
        _raise_sqlstate("40P01")


@pytest.mark.parametrize(
    ("state", "reason"), [("40P01", "deadlock"), ("40001", "serialization_failure")]
)
def test_a_deadlock_or_serialization_failure_becomes_a_retryable_lock_conflict(
    state, reason
) -> None:
    with pytest.raises(LockConflict) as raised, lock_conflicts_retried():
        _raise_sqlstate(state)
    assert raised.value.reason == reason and raised.value.sqlstate == state


def test_any_other_database_error_is_not_retried() -> None:
    with pytest.raises(DatabaseError) as raised, lock_conflicts_retried():
        _raise_sqlstate("23505")
    assert not isinstance(raised.value, LockConflict)


@pytest.mark.django_db(transaction=True)  # autocommit, as in a worker: each run is fresh
def test_a_task_that_keeps_losing_deadlocks_is_retried_a_bounded_number_of_times_and_counted() -> (
    None
):
    labels = {"task": always_deadlocked_task.name, "reason": "deadlock"}
    before = REGISTRY.get_sample_value("cacheplane_task_retries_total", labels) or 0
    result = always_deadlocked_task.apply()
    assert isinstance(result.result, LockConflict)
    retries = REGISTRY.get_sample_value("cacheplane_task_retries_total", labels) - before
    assert retries == LOCK_CONFLICT_RETRY["max_retries"]
    failures = REGISTRY.get_sample_value(
        "cacheplane_task_failures_total", {"task": always_deadlocked_task.name}
    )
    assert failures and failures >= 1


def test_a_watched_job_that_fails_and_never_succeeded_is_overdue(redis_flush) -> None:
    from controlplane.task_health import _count_failure

    # What the task_failure signal hands over when the flush's last retry fails.
    _count_failure(sender=budget_settlements_flush_task, exception=LockConflict("40P01", "x"))
    state = background_jobs_state()[FLUSH]
    assert state["failures"] == "1" and "deadlock (40P01)" in state["last_error"]
    assert [job.task for job in background_jobs_overdue()] == [FLUSH]


def test_a_settlement_flush_that_stops_succeeding_is_an_alert_on_the_platform_page(
    redis_flush, platform_admin
) -> None:
    budget_settlements_flush_task.apply()
    assert background_jobs_state()[FLUSH]["successes"] == "1"
    assert background_jobs_overdue() == []
    client = Client()
    client.force_login(platform_admin)
    assert 'id="background-alerts"' not in client.get("/platform/").content.decode()

    # Three beat intervals (5 s each) later, with no success since:
    redis_flush.hset(f"{HEALTH_KEY_PREFIX}{FLUSH}", "last_success", str(time.time() - 15))
    overdue = background_jobs_overdue()
    assert [job.task for job in overdue] == [FLUSH]
    assert overdue[0].interval_seconds == 5 and overdue[0].since_success_seconds >= 15
    page = client.get("/platform/").content.decode()
    assert 'id="background-alerts"' in page and FLUSH in page


def test_a_retry_recorded_by_any_worker_is_counted_on_the_metrics_page(redis_flush) -> None:
    from types import SimpleNamespace

    from controlplane.task_health import _count_retry

    # What the task_retry signal hands over in a Celery worker (another process): only
    # its Redis record reaches the web process that serves /metrics.
    _count_retry(request=SimpleNamespace(task=FLUSH), reason=LockConflict("40P01", "x"))
    budget_settlements_flush_task.apply()
    page = Client().get("/metrics").content.decode()
    assert f'cacheplane_background_job_runs_total{{outcome="retry",task="{FLUSH}"}} 1.0' in page
    assert f'cacheplane_background_job_runs_total{{outcome="success",task="{FLUSH}"}} 1.0' in page
    assert f'cacheplane_background_job_last_success_timestamp_seconds{{task="{FLUSH}"}}' in page


@pytest.mark.parametrize(
    "task",
    [
        "billing.tasks.usage_flush_task",
        "gateway.tasks.budget_holds_expire_task",
        "caches.tasks.cache_storage_accrue_task",
    ],
)
def test_every_beat_writer_of_budget_rows_retries_a_lost_deadlock(task) -> None:
    import importlib

    module, _, name = task.rpartition(".")
    options = getattr(importlib.import_module(module), name)
    assert LockConflict in options.autoretry_for
    assert options.max_retries == LOCK_CONFLICT_RETRY["max_retries"]
