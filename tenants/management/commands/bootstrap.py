"""Create the platform admin and the demo tenants if they do not exist (idempotent)."""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tenants import services


class Command(BaseCommand):
    help = "Create the platform admin (password from env or generated) and demo tenants."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-demo", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        username = os.environ.get("CACHEPLANE_ADMIN_USERNAME", "admin")
        password = os.environ.get("CACHEPLANE_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        created = services.platform_admin_ensure(username=username, password=password)
        if created:
            shown = (
                "(from CACHEPLANE_ADMIN_PASSWORD)"
                if os.environ.get("CACHEPLANE_ADMIN_PASSWORD")
                else password
            )
            self.stdout.write(
                f"Created platform admin '{username}' with password: {shown}\n"
                "  (shown once; set CACHEPLANE_ADMIN_PASSWORD to choose it)"
            )
        if not options["no_demo"]:
            for tenant in services.demo_tenants_ensure():
                self.stdout.write(f"Created demo tenant '{tenant.slug}'")
