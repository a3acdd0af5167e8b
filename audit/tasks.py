"""Celery tasks: thin, idempotent workers on export rows and digest batches."""

from __future__ import annotations

from celery import shared_task

# An export of millions of events runs for minutes, well past the default limits. A
# message redelivered while the first worker still runs (Redis visibility timeout) is
# harmless: the run claims the row only when it is pending or its heartbeat is stale.
EXPORT_SOFT_TIME_LIMIT = 3300
EXPORT_TIME_LIMIT = 3600


@shared_task(
    name="audit.tasks.audit_export_run_task",
    soft_time_limit=EXPORT_SOFT_TIME_LIMIT,
    time_limit=EXPORT_TIME_LIMIT,
)
def audit_export_run_task(export_id: str) -> None:
    """Produce one export's signed bundle (no-op if the export is gone or finished)."""
    from audit.selectors import audit_export_get_unscoped
    from audit.services.exports import audit_export_run

    export = audit_export_get_unscoped(export_id=export_id)
    if export is None or export.is_terminal:
        return
    audit_export_run(export=export)


@shared_task(name="audit.tasks.audit_digest_schedule_task")
def audit_digest_schedule_task() -> None:
    """Hourly: fan out one digest task per batch of chains whose head moved."""
    from audit.services.digests import audit_digest_schedule

    audit_digest_schedule()


@shared_task(name="audit.tasks.audit_digest_create_batch_task")
def audit_digest_create_batch_task(hour: str, chains: list[str]) -> None:
    """Sign the head of each chain for one hour (a chain already digested is skipped)."""
    from datetime import datetime

    from audit.services.digests import audit_digest_create_batch

    audit_digest_create_batch(hour=datetime.fromisoformat(hour), chains=list(chains))
