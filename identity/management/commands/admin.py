"""``cacheplane admin reset-password USERNAME``: recover a person's (the admin's) password.

The new password is generated and printed once, or read from standard input with
``--password-stdin`` (never from an argument: shells keep history). Audited
``identity.principal.password_reset`` with the CLI as the actor.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.errors import DomainError
from identity.services.people import person_password_reset
from tenants.actor import Actor


class Command(BaseCommand):
    help = "Operator recovery: reset-password USERNAME [--password-stdin]."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        reset = sub.add_parser("reset-password", help="Set a new password for a person.")
        reset.add_argument("username")
        reset.add_argument(
            "--password-stdin",
            action="store_true",
            help="Read the new password from standard input instead of generating one.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        chosen = sys.stdin.readline().rstrip("\n") if options.get("password_stdin") else None
        try:
            principal, password = person_password_reset(
                actor=Actor.cli(), username=options["username"], password=chosen
            )
        except DomainError as error:
            raise CommandError(error.message) from None
        if chosen is None:
            self.stdout.write(f"New password for '{principal.username}': {password}")
        else:
            self.stdout.write(f"Password of '{principal.username}' changed.")
