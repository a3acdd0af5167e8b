"""Celery tasks: thin, idempotent workers on operation rows."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from caches.providers.base import TransientProviderError
from controlplane.celery import TRANSIENT_RETRY_POLICY
from controlplane.task_health import LOCK_CONFLICT_RETRY, lock_conflicts_retried


@shared_task(
    name="caches.tasks.cache_operation_execute_task",
    autoretry_for=(TransientProviderError,),
    # The operation row bounds the attempts (its last run fails it attempts_exhausted).
    **(TRANSIENT_RETRY_POLICY | {"max_retries": settings.CACHEPLANE_OPERATION_MAX_ATTEMPTS}),
)
def cache_operation_execute_task(operation_id: str) -> None:
    """Run one attempt of a cache operation (no-op if it is finished or held elsewhere)."""
    from caches.services.execution import operation_execute

    operation_execute(operation_id=operation_id)


@shared_task(name="caches.tasks.cache_sweep_expired_task", **LOCK_CONFLICT_RETRY)
def cache_sweep_expired_task() -> None:
    """Expire due caches, one bounded batch per run (re-enqueues itself while work remains).

    A deadlock or serialization failure is retried with jitter (controlplane.task_health).
    """
    from caches.services.scheduling import cache_expire_due

    with lock_conflicts_retried():
        expired = cache_expire_due()
    if expired >= _batch():
        cache_sweep_expired_task.delay()


@shared_task(name="caches.tasks.cache_schedule_refreshes_task")
def cache_schedule_refreshes_task() -> None:
    """Enqueue refreshes (sliding/economic extensions, vLLM pins) and pre-warms that are due."""
    from caches.services.scheduling import cache_enqueue_due_refreshes

    if cache_enqueue_due_refreshes() >= _batch():
        cache_schedule_refreshes_task.delay()


@shared_task(name="caches.tasks.cache_reconcile_task")
def cache_reconcile_task() -> None:
    """Fan out reconciliation: one task per Vertex scope, plus stuck operations."""
    from caches.services.reconcile import operations_requeue_stuck, vertex_scopes_all_tenants

    operations_requeue_stuck()
    for project, location in vertex_scopes_all_tenants():
        cache_reconcile_vertex_scope_task.delay(project, location)


@shared_task(
    name="caches.tasks.cache_reconcile_vertex_scope_task",
    autoretry_for=(TransientProviderError,),
    **TRANSIENT_RETRY_POLICY,
)
def cache_reconcile_vertex_scope_task(project: str, location: str) -> None:
    """Compare one Vertex project/location with our records."""
    from caches.services.reconcile import reconcile_vertex_scope

    reconcile_vertex_scope(project=project, location=location)


def _batch() -> int:
    return settings.CACHEPLANE_SWEEP_BATCH


@shared_task(name="caches.tasks.cache_hits_flush_task")
def cache_hits_flush_task() -> None:
    """Fold the gateway's cache-hit counters into the cache rows."""
    from caches.services.hits import cache_hits_flush

    cache_hits_flush()


@shared_task(name="caches.tasks.cache_storage_accrue_task", **LOCK_CONFLICT_RETRY)
def cache_storage_accrue_task() -> None:
    """Accrue storage cost of recently live caches (idempotent per cache and hour).

    It charges budget periods (budget -> periods lock order), so it can lose a deadlock to
    a budget edit: retried with jitter (controlplane.task_health), the accrual is idempotent.
    """
    from caches.services.storage import cache_storage_accrue_recent

    with lock_conflicts_retried():
        cache_storage_accrue_recent()
