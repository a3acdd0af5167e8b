"""Background jobs that fail loudly: lock-conflict retries, their metrics, overdue alerts.

A periodic task that loses a deadlock or a serialization conflict (SQLSTATE ``40P01`` /
``40001``: PostgreSQL rolled the transaction back, nothing was written) is retried by
Celery after a jittered back-off (:data:`LOCK_CONFLICT_RETRY`: 1 s x 2^n, at most 16 s,
full jitter, 5 retries), not left for the next beat. Every retry and every task failure
is a Prometheus counter (``cacheplane_task_retries_total{task,reason}``,
``cacheplane_task_failures_total{task}``), and each watched job records its last success
and last failure in Redis. :func:`background_jobs_overdue` turns those into the
platform console's alert: a watched job whose last success is older than two beat
intervals, or that has failed and never succeeded.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery.signals import task_failure, task_retry, task_success
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from controlplane.redis import keys

#: SQLSTATEs of a transaction PostgreSQL rolled back to break a conflict: safe to rerun.
LOCK_CONFLICT_SQLSTATES = {"40P01": "deadlock", "40001": "serialization_failure"}

#: The beat jobs whose silence is an alert (sweeps and settlements; issue 29).
WATCHED_TASKS = (
    "caches.tasks.cache_sweep_expired_task",
    "gateway.tasks.budget_settlements_flush_task",
    "gateway.tasks.budget_holds_expire_task",
    "billing.tasks.budget_reservations_expire_task",
    "billing.tasks.usage_flush_task",
    "caches.tasks.cache_storage_accrue_task",
)
#: Overdue after this many beat intervals without a success.
OVERDUE_INTERVALS = 2
HEALTH_KEY_PREFIX = keys.TASK_HEALTH

TASK_RETRIES = Counter(
    "cacheplane_task_retries",
    "Task runs retried after a transient failure (reason: deadlock, serialization_failure, "
    "or the exception class).",
    ["task", "reason"],
)
TASK_FAILURES = Counter(
    "cacheplane_task_failures", "Task runs that raised and will not be retried.", ["task"]
)


class LockConflict(Exception):
    """PostgreSQL rolled the task's transaction back (deadlock or serialization failure)."""

    def __init__(self, sqlstate: str, message: str) -> None:
        # args are exactly the constructor's: Celery pickles the exception of a retry.
        super().__init__(sqlstate, message)
        self.sqlstate = sqlstate
        self.reason = LOCK_CONFLICT_SQLSTATES[sqlstate]

    def __str__(self) -> str:
        return f"{self.reason} ({self.sqlstate}): {self.args[1]}"


#: Celery options of a task whose body runs inside :func:`lock_conflicts_retried`.
LOCK_CONFLICT_RETRY: dict[str, Any] = {
    "autoretry_for": (LockConflict,),
    "retry_backoff": 1,
    "retry_backoff_max": 16,
    "retry_jitter": True,
    "max_retries": 5,
}


def _sqlstate(exc: BaseException) -> str | None:
    cause: BaseException | None = exc
    while cause is not None:
        state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        if state:
            return str(state)
        cause = cause.__cause__
    return None


@contextlib.contextmanager
def lock_conflicts_retried() -> Iterator[None]:
    """Turn a deadlock or serialization failure into :class:`LockConflict` (which the
    task's ``autoretry_for`` retries); every other database error passes unchanged."""
    # Imported here: controlplane.celery imports this module, and `cacheplane audit verify`
    # (which loads the Celery app through controlplane/__init__) must run without django.db.
    from django.db import DatabaseError

    try:
        yield
    except DatabaseError as exc:
        state = _sqlstate(exc)
        if state not in LOCK_CONFLICT_SQLSTATES:
            raise
        raise LockConflict(state, str(exc).strip().splitlines()[0] if str(exc) else "") from exc


def _interval_seconds(task_name: str) -> float | None:
    from controlplane.celery import BEAT_SCHEDULE

    for entry in BEAT_SCHEDULE.values():
        schedule = entry["schedule"]
        if entry["task"] == task_name and isinstance(schedule, timedelta):
            return schedule.total_seconds()
    return None


def _redis() -> Any:
    from controlplane import ops

    return ops.redis_client()


def _record(task_name: str, count: str, **fields: str) -> None:
    """Count one ``count`` (successes, failures, retries) of a watched job, set ``fields``."""
    if task_name not in WATCHED_TASKS:
        return
    key = keys.task_health(task_name)
    # Best effort: a Redis outage must not fail the task that just finished.
    with contextlib.suppress(Exception):
        pipe = _redis().pipeline(transaction=False)
        pipe.hincrby(key, count, 1)
        if fields:
            pipe.hset(key, mapping=fields)
        pipe.execute()


def background_jobs_state() -> dict[str, dict[str, str]]:
    """Each watched job's record: ``successes``, ``failures``, ``retries`` (counts since
    Redis was last emptied), ``last_success``, ``last_failure`` (epoch seconds),
    ``last_error``. Raises ``redis.RedisError``."""
    client = _redis()
    pipe = client.pipeline(transaction=False)
    for name in WATCHED_TASKS:
        pipe.hgetall(keys.task_health(name))
    return {
        name: {k.decode(): v.decode() for k, v in raw.items()}
        for name, raw in zip(WATCHED_TASKS, pipe.execute(), strict=True)
    }


def background_jobs_metrics() -> Iterator[Metric]:
    """The watched jobs' Redis records as Prometheus families, read at scrape time.

    The in-process counters above live in the Celery worker that ran the task, which no
    scrape of the web process sees (without a multiprocess directory); these come from the
    records every worker writes, so ``/metrics`` shows every retry wherever it ran:
    ``cacheplane_background_job_runs_total{task,outcome}`` (success, failure, retry) and
    ``cacheplane_background_job_last_success_timestamp_seconds{task}``. Nothing is
    yielded when Redis cannot answer (``/readyz`` says so).
    """
    try:
        states = background_jobs_state()
    except Exception:
        return
    runs = CounterMetricFamily(
        "cacheplane_background_job_runs",
        "Runs of each watched beat job by outcome (success, failure, retry after a "
        "deadlock or serialization failure), as recorded in Redis by every worker.",
        labels=["task", "outcome"],
    )
    last = GaugeMetricFamily(
        "cacheplane_background_job_last_success_timestamp_seconds",
        "When each watched beat job last succeeded (absent: never).",
        labels=["task"],
    )
    for name, state in states.items():
        for field, outcome in (
            ("successes", "success"),
            ("failures", "failure"),
            ("retries", "retry"),
        ):
            runs.add_metric([name, outcome], float(state.get(field, 0)))
        if "last_success" in state:
            last.add_metric([name], float(state["last_success"]))
    yield runs
    yield last


def _count_retry(request: Any = None, reason: Any = None, **_: object) -> None:
    name = getattr(request, "task", None) or "unknown"
    cause = getattr(reason, "exc", None) or reason  # celery's Retry carries the cause
    label = getattr(cause, "reason", None) or type(cause).__name__
    TASK_RETRIES.labels(task=name, reason=label).inc()
    _record(name, "retries", last_error=f"retried: {cause}"[:300])


def _count_failure(sender: Any = None, exception: BaseException | None = None, **_: object) -> None:
    name = getattr(sender, "name", None) or "unknown"
    TASK_FAILURES.labels(task=name).inc()
    _record(
        name,
        "failures",
        last_failure=str(time.time()),
        last_error=f"{type(exception).__name__}: {exception}"[:300],
    )


def _record_success(sender: Any = None, **_: object) -> None:
    _record(getattr(sender, "name", None) or "unknown", "successes", last_success=str(time.time()))


def task_health_signals_connect() -> None:
    """Connect the counters and last-success records to Celery's task signals (once)."""
    task_retry.connect(_count_retry, weak=False, dispatch_uid="cacheplane-task-retry")
    task_failure.connect(_count_failure, weak=False, dispatch_uid="cacheplane-task-failure")
    task_success.connect(_record_success, weak=False, dispatch_uid="cacheplane-task-success")


@dataclass(frozen=True)
class OverdueJob:
    """A watched beat job that has not succeeded for more than two of its intervals."""

    task: str
    interval_seconds: float
    #: Seconds since its last success (None: no success recorded).
    since_success_seconds: float | None
    last_error: str


def background_jobs_overdue(*, now: float | None = None) -> list[OverdueJob]:
    """The watched jobs that are overdue (see the module); [] when Redis cannot say."""
    now = time.time() if now is None else now
    try:
        states = background_jobs_state()
    except Exception:
        return []  # Redis itself is down: /readyz and the console's status say so
    overdue = []
    for name, state in states.items():
        interval = _interval_seconds(name)
        if interval is None or not {"last_success", "last_failure", "retries"} & state.keys():
            continue
        success = float(state["last_success"]) if "last_success" in state else None
        late = success is None or now - success > OVERDUE_INTERVALS * interval
        if not late:
            continue
        overdue.append(
            OverdueJob(
                task=name,
                interval_seconds=interval,
                since_success_seconds=None if success is None else round(now - success, 1),
                last_error=state.get("last_error", ""),
            )
        )
    return overdue
