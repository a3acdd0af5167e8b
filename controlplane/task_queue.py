"""Enqueue Celery tasks by their registered names.

Tasks call services (``<app>/tasks.py`` imports ``<app>/services``), never the other way:
a service that starts a task names it instead of importing it, so no service hides an
import cycle inside a function. The name is looked up in the Celery app's registry (the
first lookup imports every app's ``tasks`` module, as a worker does at start), so a
misspelt name fails at once, inside the caller's transaction, and ``.delay()`` keeps
every task option and eager mode in tests.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import Task
from django.db import transaction

from controlplane.celery import app


def task_get(name: str) -> Task[Any, Any]:
    """The registered task ``name``; raises KeyError when no app defines it."""
    if name not in app.tasks:
        app.loader.import_default_modules()  # autodiscovery: every app's tasks module
    return app.tasks[name]


def task_enqueue(name: str, *args: object) -> None:
    """Send task ``name`` now: for callers outside a transaction (a beat job's fan-out)."""
    task_get(name).delay(*args)


def task_enqueue_on_commit(name: str, *args: object) -> None:
    """Send task ``name`` once the current transaction commits (at once outside one)."""
    task = task_get(name)
    transaction.on_commit(partial(task.delay, *args))
