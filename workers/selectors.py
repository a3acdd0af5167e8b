"""Reads of the worker registry (shared infrastructure: no tenant scope)."""

from __future__ import annotations

from django.db.models import QuerySet

from workers.models import Worker, WorkerState


def worker_list_serving(*, model: str) -> QuerySet[Worker]:
    """Healthy workers serving ``model``."""
    return Worker.objects.filter(model=model, state=WorkerState.HEALTHY).order_by("name")
