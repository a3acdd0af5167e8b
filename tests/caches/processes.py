"""Real processes for the reliability tests: Celery workers, bounded waits.

The workers are ``celery -A controlplane worker`` subprocesses consuming from the real
Redis broker and writing to the real PostgreSQL test database; the Vertex side is the
emulator, reached over HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.db import connection

REPO = Path(__file__).resolve().parents[2]


def database_url(settings_dict: dict | None = None) -> str:
    """A DATABASE_URL for the database the tests are using (the test database)."""
    db = settings_dict or connection.settings_dict
    host = (db["HOST"] or "127.0.0.1").replace("/", "%2F")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgresql://{db['USER']}{password}@{host}{port}/{db['NAME']}"


def start_celery_worker(
    *,
    log_dir: Path,
    name: str,
    vertex_base_url: str,
    extra_env: dict[str, str] | None = None,
    database: str | None = None,
    redis: str | None = None,
) -> subprocess.Popen:
    """A solo-pool worker process (kill -9 kills exactly one task in flight)."""
    from django.conf import settings

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        {
            "DATABASE_URL": database or database_url(),
            "REDIS_URL": redis or settings.REDIS_URL,
            "CELERY_BROKER_URL": redis or settings.REDIS_URL,
            "CACHEPLANE_VERTEX_BASE_URL": vertex_base_url,
            "CACHEPLANE_VERTEX_STATIC_TOKEN": "test-token",
            "CACHEPLANE_VERTEX_PROJECT": "p1",
            "CACHEPLANE_VERTEX_LOCATION": "us-central1",
            "CACHEPLANE_LOG_FORMAT": "console",
            **(extra_env or {}),
        }
    )
    log = (log_dir / f"{name}.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "--pool",
            "solo",
            "--hostname",
            f"{name}@test",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "INFO",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll another process's progress until ``predicate``; return the seconds it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)  # polling another process's progress, not simulating work
    return time.monotonic() - start


def wait_ready(process: subprocess.Popen, log: Path, timeout: float = 180) -> float:
    """Wait until a worker from :func:`start_celery_worker` logs that it consumes tasks.

    Its start (importing the project, torch included, on a cold CI machine while the
    suite runs) is not part of any bound a test measures; a worker that exits is an
    error at once, with its log."""

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"worker exited ({process.returncode}):\n{log_tail(log)}")
        return log.exists() and " ready." in log.read_text(errors="replace")

    return wait_for(ready, timeout, f"the worker logging to {log.name} to be ready")


def start_celery_beat(*, log_dir: Path, name: str = "beat") -> subprocess.Popen:
    """``celery beat`` with the deployment's own schedule (controlplane.celery), its
    state file in ``log_dir``; publishes to the test's broker."""
    from django.conf import settings

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        {
            "DATABASE_URL": database_url(),
            "REDIS_URL": settings.REDIS_URL,
            "CELERY_BROKER_URL": settings.REDIS_URL,
            "CACHEPLANE_LOG_FORMAT": "console",
        }
    )
    log = (log_dir / f"{name}.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "beat",
            "--schedule",
            str(log_dir / f"{name}-schedule"),
            "--loglevel",
            "INFO",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def log_tail(log: Path, lines: int = 60) -> str:
    text = log.read_text(errors="replace") if log.exists() else "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
