"""Deployment-level tasks (not owned by any one app)."""

from __future__ import annotations

from celery import shared_task

from controlplane import ops


@shared_task(name="controlplane.tasks.worker_heartbeat_task", ignore_result=True)
def worker_heartbeat_task() -> None:
    """Record that a Celery worker is consuming the queue (a Redis key that expires)."""
    ops.worker_heartbeat_record()
