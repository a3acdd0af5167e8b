"""``cacheplane up``: one command that sets up and runs the whole system.

It supervises child processes (ASGI server, Celery worker, Celery beat, plus the demo
providers) and the embedded PostgreSQL and Redis it owns, and stops all of them on
Ctrl-C or when any of them dies, naming the dead one, so nothing is left running and the
data stays for the next start. Other ``cacheplane`` commands run meanwhile on the same
data dir attach to its embedded servers and never stop them (controlplane/embedded/).
What each child runs and how it is started and stopped: ``controlplane.up_processes``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from controlplane.embedded import (
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedServiceError,
    EmbeddedServices,
)
from controlplane.env import ConfigError, env_int, parse_database_url, parse_redis_url
from controlplane.up_processes import (
    DEMO_WORKER_MODEL,
    Child,
    core_children,
    demo_providers,
    wait_providers,
    wait_ready,
)

_EPILOG = """\
Every port and folder, with its environment variable (a flag wins over the variable):
  --host, --port          CACHEPLANE_HTTP_HOST (127.0.0.1), CACHEPLANE_HTTP_PORT (8000): the
                          console, REST API, gateway and WebSockets (one ASGI server)
  --data-dir              CACHEPLANE_DATA_DIR (./.cacheplane): PostgreSQL and Redis data,
                          logs, the secret key, the demo's keys
  --redis-port            CACHEPLANE_EMBEDDED_REDIS_PORT (a free port): the embedded
                          redis-server on 127.0.0.1, when REDIS_URL is unset
  --vertex-emulator-port  CACHEPLANE_VERTEX_EMULATOR_PORT (a free port): the Vertex AI
                          emulator, when no CACHEPLANE_VERTEX_PROJECT/_BASE_URL is set
  --worker-port           CACHEPLANE_DEMO_WORKER_PORT (a free port): the reference worker,
                          unless CACHEPLANE_NO_DEMO_WORKER is set
The embedded PostgreSQL listens on a Unix socket in the data dir, on no TCP port.
Port 0 means "any free port". A command attaching to a running `up` uses its ports.
"""


def _port_arg(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {raw!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {value}")
    return value


def parse_args(argv: list[str], *, data_dir: Path) -> argparse.Namespace:
    """``cacheplane up``'s options; each port and the data dir also come from a variable."""
    parser = argparse.ArgumentParser(
        prog="cacheplane up",
        description="Start the whole system and supervise it until Ctrl-C.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("CACHEPLANE_HTTP_HOST", "127.0.0.1"),
        help="address of the console, API and gateway (CACHEPLANE_HTTP_HOST)",
    )
    parser.add_argument(
        "--port",
        type=_port_arg,
        default=env_int("CACHEPLANE_HTTP_PORT", 8000, minimum=0),
        help="port of the console, API and gateway (CACHEPLANE_HTTP_PORT; default 8000)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=data_dir,
        help="where data, logs and secrets live (CACHEPLANE_DATA_DIR; default ./.cacheplane)",
    )
    parser.add_argument(
        "--redis-port",
        type=_port_arg,
        default=env_int("CACHEPLANE_EMBEDDED_REDIS_PORT", 0, minimum=0),
        help="port of the embedded Redis (CACHEPLANE_EMBEDDED_REDIS_PORT; default: free)",
    )
    parser.add_argument(
        "--vertex-emulator-port",
        type=_port_arg,
        default=env_int("CACHEPLANE_VERTEX_EMULATOR_PORT", 0, minimum=0),
        help="port of the Vertex AI emulator (CACHEPLANE_VERTEX_EMULATOR_PORT; default: free)",
    )
    parser.add_argument(
        "--worker-port",
        type=_port_arg,
        default=env_int("CACHEPLANE_DEMO_WORKER_PORT", 0, minimum=0),
        help="port of the reference worker (CACHEPLANE_DEMO_WORKER_PORT; default: free)",
    )
    parser.add_argument("--no-demo", action="store_true", help="do not create demo tenants")
    parser.add_argument(
        "--check",
        action="store_true",
        help="start everything, verify /readyz, then stop (used by tests and CI)",
    )
    args = parser.parse_args(argv)
    for option in ("port", "redis_port", "vertex_emulator_port", "worker_port"):
        if getattr(args, option) > 65535:
            parser.error(f"--{option.replace('_', '-')}: not a port number")
    if args.port == 0:
        parser.error("--port: the console needs a fixed port (0 is not allowed)")
    return args


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


def up(argv: list[str], *, data_dir: Path) -> int:
    """Run Cacheplane until interrupted; returns the process exit code."""
    args = parse_args(argv, data_dir=data_dir)
    data_dir = args.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "logs").mkdir(exist_ok=True)
    _validate_urls()
    if os.environ.get("CACHEPLANE_ENV", "development") == "development":
        os.environ.setdefault("CACHEPLANE_SECRET_KEY", _persisted_secret(data_dir))
    os.environ["CACHEPLANE_DATA_DIR"] = str(data_dir)  # the children use the same one
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

    # roles=True: the application connects as a role that cannot rewrite the audit
    # tables; migrations run as the owner role (controlplane/dbroles.py).
    services = EmbeddedServices(data_dir, roles=True, redis_port=args.redis_port)
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
    children.extend(
        demo_providers(
            python,
            logs,
            data_dir,
            vertex_port=args.vertex_emulator_port,
            worker_port=args.worker_port,
        )
    )
    django.setup()  # raises ConfigError for a bad or missing variable
    _check_reachable()
    from controlplane.assets import ensure_assets

    ensure_assets()  # the console's npm packages (npm ci from package-lock.json)
    _migrate()
    call_command("bootstrap", *([] if not args.no_demo else ["--no-demo"]))

    env = dict(os.environ)
    children.extend(
        core_children(python=python, host=args.host, port=args.port, logs=logs, data_dir=data_dir)
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
    if not wait_ready(url, children):
        if _dead_service(services):
            return 1
        dead = [c for c in children if c.process is not None and c.process.poll() is not None]
        for child in dead or children[:1]:
            print(f"cacheplane: {child.name} failed to start:\n{child.tail()}", file=sys.stderr)
        return 1
    wait_providers(children)  # the demo's caches need them serving, not starting
    _register_demo_worker()
    if not args.no_demo and not args.check:  # demo people, keys, caches, bounded traffic
        # --first-start: a restart neither re-sends the 600 requests nor shows a password
        call_command("demo", "--url", url, "--background", "--first-start", "--requests", "600")
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
