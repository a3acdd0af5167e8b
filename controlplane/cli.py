"""The ``cacheplane`` command.

- ``cacheplane up``: start everything (embedded PostgreSQL/Redis when their URLs are
  unset), migrate, bootstrap, then run the ASGI server, a Celery worker and Celery beat
  until Ctrl-C; data is kept under ``.cacheplane/`` for the next start.
- ``cacheplane worker ...``: the embedded reference worker (vLLM-compatible).
- ``cacheplane manage ...`` or ``cacheplane <django command> ...``: any management
  command, e.g. ``cacheplane audit verify-chain``.
- ``cacheplane audit verify PATH --public-key FILE``: check an audit export offline
  (runs without Django, a database or embedded services).

Configuration problems end the command with one line naming the variable.
"""

from __future__ import annotations

import os
import sys
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


def _with_embedded_services(argv: list[str]) -> int:
    """Run a management command, starting embedded services only if URLs are unset."""
    from controlplane.embedded import EmbeddedServiceError, EmbeddedServices

    services = EmbeddedServices(_data_dir())
    try:
        os.environ.update(services.start())
    except EmbeddedServiceError as exc:
        return _fail(str(exc))
    try:
        return run_django_command(argv)
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
