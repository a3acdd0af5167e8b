"""Services enqueue tasks by name: ``tasks.py`` imports services, never the other way."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.services.digests import DIGEST_CREATE_BATCH_TASK
from audit.services.exports import EXPORT_RUN_TASK
from billing.services.budget_alerts import ALERT_DELIVER_TASK
from caches.services.lifecycle import OPERATION_EXECUTE_TASK
from controlplane.task_queue import task_get
from tests.test_access_layering import DOMAIN_APPS, ROOT, imported_modules


def _service_modules() -> list[Path]:
    paths: list[Path] = []
    for app in DOMAIN_APPS:
        paths += sorted((ROOT / app / "services").rglob("*.py"))
        paths += [p for p in (ROOT / app / "services.py",) if p.exists()]
    return paths


def test_no_service_imports_a_tasks_module() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _service_modules()
        for name in imported_modules(path)
        if name.split(".")[-1] == "tasks"
    ]
    assert _service_modules() and offenders == []


@pytest.mark.parametrize(
    "name",
    [OPERATION_EXECUTE_TASK, ALERT_DELIVER_TASK, EXPORT_RUN_TASK, DIGEST_CREATE_BATCH_TASK],
)
def test_every_task_a_service_enqueues_by_name_is_registered(name: str) -> None:
    assert task_get(name).name == name


def test_a_misspelt_task_name_fails_at_once() -> None:
    with pytest.raises(KeyError):
        task_get("caches.tasks.no_such_task")
