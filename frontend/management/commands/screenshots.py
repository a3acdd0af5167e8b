"""``cacheplane screenshots``: refresh the README's console screenshots (see
``frontend/screenshots.py``; never run by the test suite)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from frontend.screenshots import main


class Command(BaseCommand):
    help = "Capture the console's main pages from a running Cacheplane into frontend/screenshots/."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs="*")

    def run_from_argv(self, argv: list[str]) -> None:
        raise SystemExit(main(argv[2:]))

    def handle(self, *args: str, **options: Any) -> None:
        raise SystemExit(main(list(args)))
