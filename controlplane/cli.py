"""The ``cacheplane`` command.

- ``cacheplane up``: start everything (embedded PostgreSQL/Redis when their URLs are
  unset), migrate, bootstrap, then run the ASGI server, a Celery worker and Celery beat
  until Ctrl-C; data is kept under ``.cacheplane/`` for the next start
  (``cacheplane up --help`` lists every port and the data dir, with their variables).
- ``cacheplane worker ...``: the embedded reference worker (vLLM-compatible).
- ``cacheplane manage ...`` or ``cacheplane <django command> ...``: any management
  command, e.g. ``cacheplane audit verify-chain``.
- ``cacheplane audit verify PATH --public-key FILE``: check an audit export offline
  (runs without Django, a database or embedded services).
- ``cacheplane db-grant [ROLE]``: after a migrate, grant the application role (default:
  the user of ``DATABASE_URL``) its privileges, without UPDATE/DELETE/TRUNCATE on the
  audit tables; run as the owner (``DATABASE_MIGRATE_URL``).

Embedded services (``DATABASE_URL`` / ``REDIS_URL`` unset) belong to the process that
starts them. A command run while ``cacheplane up`` runs on the same data dir attaches to
its servers and leaves them running when it ends.

Configuration problems end the command with one line naming the variable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from controlplane.env import ConfigError

EXIT_CONFIG = 2


def _fail(message: str) -> int:
    print(f"cacheplane: {message}", file=sys.stderr)
    return EXIT_CONFIG


def _data_dir() -> Path:
    return Path(os.environ.get("CACHEPLANE_DATA_DIR") or Path.cwd() / ".cacheplane").resolve()


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()


def run_django_command(argv: list[str]) -> int:
    """Run a management command; a bad configuration ends it with one clear line."""
    from django.core.management import execute_from_command_line

    try:
        _setup_django()
        execute_from_command_line(argv)
    except ConfigError as exc:
        return _fail(f"configuration error: {exc}")
    return 0


def _migrate_argv(argv: list[str]) -> list[str]:
    """``migrate`` runs as the owner role when one is configured (DATABASE_MIGRATE_URL)."""
    if argv[1:2] != ["migrate"] or not os.environ.get("DATABASE_MIGRATE_URL"):
        return argv
    if any(arg == "--database" or arg.startswith("--database=") for arg in argv):
        return argv
    return [*argv, "--database", "migrate"]


def _grant_after_migrate(argv: list[str]) -> None:
    if argv[1:2] == ["migrate"] and os.environ.get("DATABASE_MIGRATE_URL"):
        from controlplane.dbroles import app_role_grant_configured

        granted = app_role_grant_configured()
        if granted:
            print(f"granted application role {granted[0]} (append-only: {', '.join(granted[1])})")


def db_grant(rest: list[str]) -> int:
    """``cacheplane db-grant [ROLE]``: the application role's privileges after a migrate."""
    from controlplane.dbroles import app_role_grant_configured

    _setup_django()
    granted = app_role_grant_configured(role=rest[0] if rest else None)
    if granted is None:
        return _fail(
            "db-grant: name the application role, or set DATABASE_MIGRATE_URL (the owner) "
            "and DATABASE_URL (the application role) to different users"
        )
    print(f"granted application role {granted[0]} (append-only: {', '.join(granted[1])})")
    return 0


def _with_embedded_services(argv: list[str], run: Callable[[], int] | None = None) -> int:
    """Run a command with embedded services for the URLs that are unset: started (and
    stopped at the end) when nobody runs them, attached to (and left running) when
    another process such as ``cacheplane up`` owns them."""
    from controlplane.embedded import EmbeddedServiceError, EmbeddedServices

    if os.environ.get("CACHEPLANE_ENV", "development") == "development":
        from controlplane.up import _persisted_secret

        # The secret `cacheplane up` uses for this data dir: API keys are digested with
        # it, so a key `cacheplane demo` (or any command) creates must verify in the server.
        _data_dir().mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("CACHEPLANE_SECRET_KEY", _persisted_secret(_data_dir()))
    services = EmbeddedServices(_data_dir(), roles=True)
    try:
        os.environ.update(services.start())
    except EmbeddedServiceError as exc:
        return _fail(str(exc))
    try:
        if run is not None:
            return run()
        argv = _migrate_argv(argv)
        if argv[1:2] == ["migrate"] and os.environ.get("DATABASE_MIGRATE_URL"):
            # Before migrating: the run's data migrations write as the application role.
            from controlplane.dbroles import app_role_default_privileges_configured

            _setup_django()
            app_role_default_privileges_configured()
        status = run_django_command(argv)
        if status == 0:
            _grant_after_migrate(argv)
        return status
    finally:
        services.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cacheplane`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(__doc__)
        return 0
    command, rest = args[0], args[1:]
    try:
        if command == "up":
            from controlplane.up import up

            return up(rest, data_dir=_data_dir())
        if command == "worker":
            from workers.engine_launch import worker_main

            return worker_main(rest)
        if command == "audit" and rest[:1] == ["verify"]:
            # Offline verification needs no database, no services and no Django.
            from audit.verify import main as audit_verify_main

            return audit_verify_main(rest[1:])
        if command == "db-grant":
            return _with_embedded_services([], run=lambda: db_grant(rest))
        if command == "manage":
            return _with_embedded_services(["cacheplane", *rest])
        command = command.replace("-", "_")  # `isolation-check` → isolation_check
        return _with_embedded_services(["cacheplane", command, *rest])
    except ConfigError as exc:
        return _fail(f"configuration error: {exc}")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
