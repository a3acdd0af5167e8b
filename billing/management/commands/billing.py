"""``cacheplane billing reprice --since ISO [--until ISO] [--tenant SLUG]``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from billing.services.reprice import usage_reprice
from tenants.actor import Actor
from tenants.models import Tenant


def _moment(value: str, option: str) -> datetime:
    moment = parse_datetime(value) if value else None
    if moment is None:
        raise CommandError(f"{option}: expected an ISO 8601 date-time, got {value!r}")
    if moment.tzinfo is None:
        raise CommandError(f"{option}: give a UTC offset (e.g. 2026-11-01T00:00:00Z)")
    return moment


class Command(BaseCommand):
    help = "Billing tools."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True)
        reprice = sub.add_parser(
            "reprice",
            help="recompute usage costs and rollups with the prices effective at each row's time",
        )
        reprice.add_argument("--since", required=True, help="ISO date-time (inclusive)")
        reprice.add_argument("--until", help="ISO date-time (exclusive; default: no end)")
        reprice.add_argument("--tenant", help="tenant slug (default: every tenant)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["subcommand"] == "reprice":
            self._reprice(options)

    def _reprice(self, options: dict[str, Any]) -> None:
        since = _moment(options["since"], "--since")
        until = _moment(options["until"], "--until") if options.get("until") else None
        if until is not None and until <= since:
            raise CommandError("--until must be after --since")
        tenant = None
        if options.get("tenant"):
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"unknown tenant {options['tenant']!r}")
        result = usage_reprice(actor=Actor.cli(), since=since, until=until, tenant=tenant)
        self.stdout.write(
            f"Repriced {result.rows_changed} of {result.rows_scanned} usage rows "
            f"(delta {result.delta_micros:+d} micro-USD) and {result.storage_rows_changed} of "
            f"{result.storage_rows_scanned} storage accruals "
            f"(delta {result.storage_delta_micros:+d} micro-USD)."
        )
