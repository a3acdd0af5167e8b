"""Celery tasks for the worker registry."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="workers.tasks.workers_probe_task")
def workers_probe_task() -> None:
    """Scrape every worker's /health and /metrics and push a snapshot to the console."""
    from workers.services import workers_probe_all

    workers_probe_all()
