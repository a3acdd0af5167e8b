"""The Celery application and its one beat schedule.

The worker settings are ``CELERY_*`` values in ``controlplane/settings_services.py`` (read lazily,
so importing this module touches no settings). They follow STYLE.md:
- ``acks_late`` + prefetch 1: a task is acknowledged only after it finished, so a worker
  killed mid-task hands the message back instead of losing it; prefetch 1 keeps one
  slow task from holding others hostage.
- ``reject_on_worker_lost``: a task whose worker died is redelivered (tasks are
  idempotent workers on a status row, so running twice is safe).
- Soft/hard time limits bound every task; Redis ``visibility_timeout`` is set above the
  hard limit so a still-running task is never redelivered to a second worker.
- Results are not stored: state lives in the operation rows, not in a result backend.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, TypedDict

from celery import Celery, Task
from celery.schedules import crontab
from celery.signals import before_task_publish, task_postrun, task_prerun

from controlplane.task_health import task_health_signals_connect

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("cacheplane")
app.config_from_object("django.conf:settings", namespace="CELERY")


# One schedule for the whole deployment; each entry says why it runs at its cadence.
BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # Workers announce liveness for /readyz and the console; 30 s keeps the signal fresh
    # while costing one Redis SETEX per worker per period.
    "controlplane-worker-heartbeat": {
        "task": "controlplane.tasks.worker_heartbeat_task",
        "schedule": timedelta(seconds=30),
    },
    # Signed audit digests (CloudTrail-style): hourly bounds how much recent history a
    # database rewrite could hide; at five past so each digest falls clearly inside its
    # hour. The task only fans out, one task per batch of chains that moved.
    "audit-digest-hourly": {
        "task": "audit.tasks.audit_digest_schedule_task",
        "schedule": crontab(minute=5),
    },
    # TTL sweeper: 15 s bounds how long an expired cache still reads as active; each run
    # touches only due rows through a partial index and re-enqueues itself if a batch fills.
    "caches-sweep-expired": {
        "task": "caches.tasks.cache_sweep_expired_task",
        "schedule": timedelta(seconds=15),
    },
    # Refresh/pre-warm scheduler: reviews run at 80 % of a TTL and vLLM pins every
    # CACHEPLANE_VLLM_PIN_REFRESH_SECONDS (default 120 s), so 15 s is ample resolution.
    "caches-schedule-refreshes": {
        "task": "caches.tasks.cache_schedule_refreshes_task",
        "schedule": timedelta(seconds=15),
    },
    # Reconciliation lists whole provider scopes (API calls, quota): every 5 minutes finds
    # drift and dead-worker operations well before typical TTLs run out.
    # Cache hit counters from the gateway: 10 s keeps sliding TTLs and the query-rate EWMA
    # current while costing one batched UPDATE per active cache per period.
    "caches-hits-flush": {
        "task": "caches.tasks.cache_hits_flush_task",
        "schedule": timedelta(seconds=10),
    },
    # Worker scrape: KV usage drives the gateway's memory-pressure shedding and the console's
    # workers page; 5 s tracks pressure changes within a few requests' time.
    "workers-probe": {
        "task": "workers.tasks.workers_probe_task",
        "schedule": timedelta(seconds=5),
    },
    # Storage accrual: every 10 minutes keeps spend current to the quarter hour; the accrual
    # is idempotent per cache-hour, so overlapping runs cost nothing extra.
    "caches-storage-accrue": {
        "task": "caches.tasks.cache_storage_accrue_task",
        "schedule": timedelta(minutes=10),
    },
    "caches-reconcile": {
        "task": "caches.tasks.cache_reconcile_task",
        "schedule": timedelta(minutes=5),
    },
    # Usage ledger flush: 5 s keeps spend, rollups and the console at most a few seconds
    # behind while batching thousands of requests per INSERT; one run drains at most
    # CACHEPLANE_BILLING_FLUSH_MAX_BATCHES batches and overlapping runs skip (Redis lock).
    "billing-usage-flush": {
        "task": "billing.tasks.usage_flush_task",
        "schedule": timedelta(seconds=5),
    },
    # Budget holds nobody settled (crashed or timed-out requests): a minute is far below
    # the default 15-minute hold, so a leaked hold blocks budget for at most ~16 minutes;
    # one batch per run, re-enqueued while batches fill.
    # Gateway budget holds settled in Redis: 5 s keeps BudgetPeriod rows (the console,
    # alerts) as current as the usage ledger, one statement per period per batch.
    "gateway-budget-settlements-flush": {
        "task": "gateway.tasks.budget_settlements_flush_task",
        "schedule": timedelta(seconds=5),
    },
    # Holds of a gateway that died expire after the upstream timeout plus 30 s; every
    # reserve on the period drops them too, this sweep covers idle periods.
    "gateway-budget-holds-expire": {
        "task": "gateway.tasks.budget_holds_expire_task",
        "schedule": timedelta(seconds=30),
    },
    "billing-reservations-expire": {
        "task": "billing.tasks.budget_reservations_expire_task",
        "schedule": timedelta(seconds=60),
    },
}


class RetryPolicy(TypedDict):
    retry_backoff: int
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int


# The one retry policy for calls that leave the system (providers, webhooks), stated in
# the README (Development, Code health): a call is one HTTP request (the google-genai
# client is built with attempts=1, httpx does not retry); a transient error fails the task
# run and Celery runs it again after 2 s x 2^n (at most 60 s), full jitter. The durable
# bound is the row's attempt counter: a cache operation's (CACHEPLANE_OPERATION_MAX_ATTEMPTS,
# its task retries that many times so Celery never gives up first), an alert's webhook
# attempts (6). Tasks without a row (reconciliation) stop after ``max_retries``.
TRANSIENT_RETRY_POLICY: RetryPolicy = {
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
}

app.conf.beat_schedule = BEAT_SCHEDULE
# Retry and failure counters, last-success records of the watched beat jobs.
task_health_signals_connect()
app.autodiscover_tasks(
    ["controlplane", "tenants", "audit", "caches", "billing", "workers", "gateway"]
)


@before_task_publish.connect
def _propagate_request_id(headers: dict[str, object] | None = None, **_: object) -> None:
    """Carry the publishing request's id to the task so its logs and audit rows match."""
    from controlplane.request_context import get_request_id

    if headers is not None and "cacheplane_request_id" not in headers:
        headers["cacheplane_request_id"] = get_request_id()


@task_prerun.connect
def _bind_request_id(task: Task[Any, Any] | None = None, **_: object) -> None:
    from controlplane.request_context import sanitize_request_id, set_request_id

    if task is None:  # task_prerun always names its task
        return
    incoming = getattr(task.request, "cacheplane_request_id", None)
    # The request context takes arbitrary attributes; the stubs declare only Celery's own.
    task.request.cacheplane_token = set_request_id(sanitize_request_id(incoming))  # type: ignore[attr-defined]


@task_postrun.connect
def _unbind_request_id(task: Task[Any, Any] | None = None, **_: object) -> None:
    from controlplane.request_context import reset_request_id

    token = getattr(task.request, "cacheplane_token", None) if task else None
    if token is not None:
        try:
            reset_request_id(token)
        except ValueError:
            pass  # token from another context (eager mode); nothing to restore
