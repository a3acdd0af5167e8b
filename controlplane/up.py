"""``cacheplane up``: one command that sets up and runs the whole system.

It supervises child processes (ASGI server, Celery worker, Celery beat, plus the demo
providers) and the embedded PostgreSQL and Redis it owns, and stops all of them on
Ctrl-C or when any of them dies, naming the dead one, so nothing is left running and the
data stays for the next start. Other ``cacheplane`` commands run meanwhile on the same
data dir attach to its embedded servers and never stop them (controlplane/embedded/).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controlplane.embedded import (
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedServiceError,
    EmbeddedServices,
    free_port,
)
from controlplane.env import ConfigError, parse_database_url, parse_redis_url


@dataclass
class Child:
    """One supervised process and the log file it writes to."""

    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str]) -> None:
        log = self.log_path.open("ab")
        # Each child's database connections carry its name in pg_stat_activity.
        env = {"CACHEPLANE_DB_APPLICATION_NAME": f"cacheplane-{self.name}", **env}
        self.process = subprocess.Popen(
            self.argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cacheplane up", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("CACHEPLANE_HTTP_HOST", "127.0.0.1"))
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("CACHEPLANE_HTTP_PORT", "8000"))
    )
    parser.add_argument("--no-demo", action="store_true", help="do not create demo tenants")
    parser.add_argument(
        "--check",
        action="store_true",
        help="start everything, verify /readyz, then stop (used by tests and CI)",
    )
    return parser.parse_args(argv)


def _persisted_secret(data_dir: Path) -> str:
    """Development secret key, generated once and kept with the data (mode 0600)."""
    path = data_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    value = secrets.token_urlsafe(64)
    path.write_text(value)
    path.chmod(0o600)
    return value


def _validate_urls() -> None:
    """Reject malformed URLs before anything starts (a clear line, not a traceback)."""
    if os.environ.get("DATABASE_URL"):
        parse_database_url("DATABASE_URL", os.environ["DATABASE_URL"])
    if os.environ.get("REDIS_URL"):
        parse_redis_url("REDIS_URL", os.environ["REDIS_URL"])


def _check_reachable() -> None:
    from controlplane import ops

    problem = ops.check_database()
    if problem:
        raise ConfigError("DATABASE_URL", f"cannot connect to the database ({problem})")
    problem = ops.check_redis()
    if problem:
        raise ConfigError("REDIS_URL", f"cannot connect to Redis ({problem})")


def _wait_ready(url: str, children: list[Child], timeout: float = 60.0) -> bool:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(c.process is not None and c.process.poll() is not None for c in children):
            return False
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # polling a starting server
    return False


def _wait_providers(children: list[Child], timeout: float = 60.0) -> None:
    """Wait until the local provider stand-ins answer their health checks.

    The demo creates caches on them right away; a Vertex emulator still binding its port
    made the first demo cache fail once. Bounded: past ``timeout`` the demo goes ahead
    (its cache follower re-creates a cache that failed) and a warning says which is late.
    """
    import httpx

    checks = {
        "vertex-emulator": f"{os.environ.get('CACHEPLANE_VERTEX_BASE_URL')}/_emulator/healthz",
        "reference-worker": f"{os.environ.get('CACHEPLANE_DEMO_WORKER_URL')}/health",
    }
    waiting = {c.name: checks[c.name] for c in children if c.name in checks}
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for name, url in list(waiting.items()):
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    del waiting[name]
            except httpx.HTTPError:
                pass
        if waiting:
            time.sleep(0.2)  # polling starting servers
    for name in waiting:
        print(f"cacheplane: {name} is not answering yet; the demo goes ahead", file=sys.stderr)


def up(argv: list[str], *, data_dir: Path) -> int:
    """Run Cacheplane until interrupted; returns the process exit code."""
    args = _parse_args(argv)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "logs").mkdir(exist_ok=True)
    _validate_urls()
    if os.environ.get("CACHEPLANE_ENV", "development") == "development":
        os.environ.setdefault("CACHEPLANE_SECRET_KEY", _persisted_secret(data_dir))
    os.environ.setdefault("CACHEPLANE_DATA_DIR", str(data_dir))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

    # roles=True: the application connects as a role that cannot rewrite the audit
    # tables; migrations run as the owner role (controlplane/dbroles.py).
    services = EmbeddedServices(data_dir, roles=True)
    try:
        exported = services.start()
    except EmbeddedServiceError as exc:
        print(f"cacheplane: {exc}", file=sys.stderr)
        return 1
    os.environ.update(exported)
    children: list[Child] = []
    try:
        return _run(args, data_dir, exported, children, services)
    finally:
        for child in reversed(children):
            child.stop()
        services.stop()


def _dead_service(services: EmbeddedServices) -> bool:
    """Report a dead embedded service loudly; True when one died."""
    dead = services.dead()
    for name in dead:
        print(
            f"cacheplane: {name} exited unexpectedly; stopping.\n{services.log_tail(name)}",
            file=sys.stderr,
        )
    return bool(dead)


def _migrate() -> None:
    """Migrations as the owner role when there is one, then the application role's grants."""
    from django.core.management import call_command
    from django.db import connections

    from controlplane.dbroles import app_role_grant_configured

    database = "migrate" if "migrate" in connections else "default"
    call_command("migrate", interactive=False, verbosity=0, database=database)
    app_role_grant_configured()


def _run(
    args: argparse.Namespace,
    data_dir: Path,
    exported: dict[str, str],
    children: list[Child],
    services: EmbeddedServices,
) -> int:
    import django
    from django.core.management import call_command

    python = sys.executable
    logs = data_dir / "logs"
    # Before django.setup(): the stand-ins' URLs and the demo Vertex project go into
    # os.environ, and this process's settings must see them too. (Set after setup, the
    # demo created its Vertex caches here with an empty project, and the Celery worker
    # then failed every one of them.)
    children.extend(_demo_providers(python, logs, data_dir))
    django.setup()  # raises ConfigError for a bad or missing variable
    _check_reachable()
    from controlplane.assets import ensure_assets

    ensure_assets()  # the console's npm packages (npm ci from package-lock.json)
    _migrate()
    call_command("bootstrap", *([] if not args.no_demo else ["--no-demo"]))

    env = dict(os.environ)
    children.extend(
        [
            Child(
                "web",
                [
                    python,
                    "-m",
                    "uvicorn",
                    "controlplane.asgi:application",
                    "--host",
                    args.host,
                    "--port",
                    str(args.port),
                    "--no-access-log",
                    "--log-level",
                    "warning",
                ],
                logs / "web.log",
            ),
            Child(
                "celery-worker",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "controlplane",
                    "worker",
                    "--loglevel",
                    "INFO",
                    "--concurrency",
                    "2",
                    "--hostname",
                    f"cacheplane@{os.uname().nodename}",
                ],
                logs / "celery-worker.log",
            ),
            Child(
                "celery-beat",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "controlplane",
                    "beat",
                    "--loglevel",
                    "INFO",
                    "--schedule",
                    str(data_dir / "celerybeat-schedule"),
                ],
                logs / "celery-beat.log",
            ),
        ]
    )

    stop_requested = False

    def _on_signal(signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    for child in children:
        child.start(env)

    url = f"http://{args.host}:{args.port}"
    if not _wait_ready(url, children):
        if _dead_service(services):
            return 1
        dead = [c for c in children if c.process is not None and c.process.poll() is not None]
        for child in dead or children[:1]:
            print(f"cacheplane: {child.name} failed to start:\n{child.tail()}", file=sys.stderr)
        return 1
    _wait_providers(children)  # the demo's caches need them serving, not starting
    _register_demo_worker()
    if not args.no_demo and not args.check:  # demo people, keys, caches, bounded traffic
        call_command("demo", "--url", url, "--background", "--requests", "600")
    _print_banner(url, exported, logs, services)
    if args.check:
        return 0
    while not stop_requested:
        for child in children:
            if child.process is not None and child.process.poll() is not None:
                print(
                    f"cacheplane: {child.name} exited ({child.process.returncode}); "
                    f"stopping.\n{child.tail()}",
                    file=sys.stderr,
                )
                return 1
        if _dead_service(services):
            return 1
        time.sleep(0.5)  # supervisor idle loop
    print(f"\ncacheplane: stopping (data kept in {data_dir})")
    return 0


def _demo_providers(python: str, logs: Path, data_dir: Path) -> list[Child]:
    """Local stand-ins for providers, started only when no real ones are configured:
    a Vertex AI emulator when no GCP project is set, and one reference worker."""
    extra: list[Child] = []
    if not os.environ.get("CACHEPLANE_VERTEX_PROJECT") and not os.environ.get(
        "CACHEPLANE_VERTEX_BASE_URL"
    ):
        port = free_port()
        os.environ.update(
            {
                "CACHEPLANE_VERTEX_BASE_URL": f"http://127.0.0.1:{port}",
                "CACHEPLANE_VERTEX_STATIC_TOKEN": "demo-token",
                "CACHEPLANE_VERTEX_PROJECT": "cacheplane-demo",
                "CACHEPLANE_VERTEX_LOCATION": "us-central1",
            }
        )
        extra.append(
            Child(
                "vertex-emulator",
                [
                    python,
                    "-m",
                    "caches.providers.vertex_emulator",
                    "--port",
                    str(port),
                    "--state-file",
                    str(data_dir / "vertex-emulator.json"),
                    "--log-level",
                    "warning",
                ],
                logs / "vertex-emulator.log",
            )
        )
    if not os.environ.get("CACHEPLANE_NO_DEMO_WORKER"):
        port = free_port()
        os.environ["CACHEPLANE_DEMO_WORKER_URL"] = f"http://127.0.0.1:{port}"
        extra.append(
            Child(
                "reference-worker",
                [
                    python,
                    "-m",
                    "workers.engine.cli",
                    "--port",
                    str(port),
                    "--served-model-name",
                    DEMO_WORKER_MODEL,
                    "--enable-prompt-tokens-details",
                    "--uvicorn-log-level",
                    "warning",
                ],
                logs / "reference-worker.log",
            )
        )
    return extra


DEMO_WORKER_MODEL = "cacheplane/ref-tiny"


def _register_demo_worker() -> None:
    url = os.environ.get("CACHEPLANE_DEMO_WORKER_URL")
    if not url:
        return
    from tenants.actor import Actor
    from workers.services import worker_register

    worker_register(
        actor=Actor.cli(),
        name="demo-reference-0",
        base_url=url,
        model=DEMO_WORKER_MODEL,
        pool="demo",
    )


def _ownership(service: EmbeddedPostgres | EmbeddedRedis | None) -> str:
    if service is None or service.owned or service.ownership is None:
        return ""
    return f" (attached; owned by pid {service.ownership.info.get('owner_pid')})"


def _print_banner(
    url: str, exported: dict[str, str], logs: Path, services: EmbeddedServices
) -> None:
    lines = [
        "",
        "Cacheplane is running.",
        f"  Console:   {url}/",
        f"  API:       {url}/api/v1/ (schema at {url}/api/v1/schema)",
        f"  Health:    {url}/healthz  {url}/readyz  {url}/metrics",
        f"  Logs:      {logs}/",
    ]
    if "DATABASE_URL" in exported:
        lines.append(
            f"  Database:  embedded PostgreSQL (data in {logs.parent / 'postgres'})"
            f"{_ownership(services.postgres)}"
        )
        if "DATABASE_MIGRATE_URL" in exported:
            lines.append(
                "             app role cacheplane_app (no UPDATE/DELETE on audit tables), "
                "migrations as cacheplane_owner"
            )
    if "REDIS_URL" in exported:
        lines.append(
            f"  Redis:     embedded redis-server at {exported['REDIS_URL']}"
            f"{_ownership(services.redis)}"
        )
    demo_worker = os.environ.get("CACHEPLANE_DEMO_WORKER_URL")
    if demo_worker:
        lines.append(f"  Worker:    reference vLLM-compatible worker at {demo_worker}")
    if "demo-token" == os.environ.get("CACHEPLANE_VERTEX_STATIC_TOKEN"):
        lines.append(f"  Vertex:    emulator at {os.environ['CACHEPLANE_VERTEX_BASE_URL']}")
    lines.append("Press Ctrl-C to stop.")
    print("\n".join(lines), flush=True)
