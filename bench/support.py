"""Shared set-up for benchmarks that need PostgreSQL: a scratch database, migrated.

With DATABASE_URL unset, embedded PostgreSQL and Redis are started (as the test suite
does); either way the benchmark runs in its own database, dropped at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


@contextlib.contextmanager
def scratch_django(name: str) -> Iterator[None]:
    """Point Django at a fresh, migrated database ``bench_<name>_<pid>``; drop it after."""
    import psycopg

    from controlplane.embedded import EmbeddedServices

    services = None
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        base = REPO / ".cacheplane" / "bench-runs"
        base.mkdir(parents=True, exist_ok=True)
        services = EmbeddedServices(Path(tempfile.mkdtemp(dir=base)), persist_redis=False)
        os.environ.update(services.start())
    import dj_database_url

    config = dj_database_url.parse(os.environ["DATABASE_URL"])
    db_name = f"bench_{name}_{os.getpid()}"
    params = {
        "host": config["HOST"] or "127.0.0.1",
        "user": config["USER"] or "postgres",
        "dbname": "postgres",
        "autocommit": True,
    }
    if config.get("PORT"):
        params["port"] = config["PORT"]
    if config.get("PASSWORD"):
        params["password"] = config["PASSWORD"]
    with psycopg.connect(**params) as conn:
        conn.execute(f'CREATE DATABASE "{db_name}"')
    password = f":{quote(config['PASSWORD'], safe='')}" if config.get("PASSWORD") else ""
    port = f":{config['PORT']}" if config.get("PORT") else ""
    host = quote(params["host"], safe="")
    os.environ["DATABASE_URL"] = f"postgresql://{params['user']}{password}@{host}{port}/{db_name}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("CACHEPLANE_LOG_LEVEL", "WARNING")
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        yield
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(**params) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
        if services is not None:
            services.stop()
            shutil.rmtree(services.data_dir, ignore_errors=True)


def wait_http(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    """Wait until ``url`` answers (any status); exit the benchmark if ``process`` dies
    first or ``timeout`` seconds pass (polling a starting server, not simulating work)."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise SystemExit(f"{process.args[:4]} exited with {process.returncode} at start")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer within {timeout:.0f} s") from None
            time.sleep(0.1)


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
