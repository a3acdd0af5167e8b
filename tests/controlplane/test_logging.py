"""Logs at INFO carry useful lines only: per-request and per-task chatter is silenced."""

from __future__ import annotations

import logging
import logging.config

import pytest
from django.conf import settings


@pytest.fixture(autouse=True)
def _configured_logging() -> None:
    """Judge the configured logging, not what an earlier test (a Celery worker started
    in-process sets the root level) left behind."""
    logging.config.dictConfig(settings.LOGGING)


@pytest.mark.parametrize(
    "name",
    [
        "google_genai.models",  # "AFC is enabled ..." per request
        "httpx",  # "HTTP Request: POST ... 200 OK" per request
        "celery.app.trace",  # "Task ... succeeded in 0.01s" per task
        "celery.worker.strategy",  # "Task ... received" per task
        "celery.beat",  # "Scheduler: Sending due task" per beat entry
    ],
)
def test_chatty_libraries_log_nothing_at_info(name: str) -> None:
    logger = logging.getLogger(name)
    assert not logger.isEnabledFor(logging.INFO)
    assert logger.isEnabledFor(logging.WARNING)


def test_our_own_info_lines_still_log() -> None:
    assert logging.getLogger("caches.services").isEnabledFor(logging.INFO)
