"""Logging: one stderr handler, JSON by default, with the request id on every line."""

from __future__ import annotations

from controlplane.env import env_choice

LOG_LEVEL = env_choice("CACHEPLANE_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
LOG_FORMAT = env_choice("CACHEPLANE_LOG_FORMAT", "json", ("json", "console"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "controlplane.logging.RequestIdFilter"}},
    "formatters": {
        "json": {
            "()": "controlplane.logging.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
        "console": {"format": "%(asctime)s %(levelname)-7s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["stderr"], "level": LOG_LEVEL},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "uvicorn.access": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # google-genai logs an INFO line for every request ("AFC is enabled ...").
        "google_genai": {"level": "WARNING"},
        # Celery's per-task INFO lines ("Task ... received", "... succeeded in 0.01s",
        # beat's "Sending due task"): with a 5 s beat schedule they were ~40 KB a minute
        # of logs on an idle system. Failures and retries still log at WARNING/ERROR.
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
        "celery.beat": {"level": "WARNING"},
    },
}
