"""``cacheplane audit verify-chain [--tenant SLUG]``: recompute chains from the database."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit import selectors
from audit.models import PLATFORM_CHAIN
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Audit log tools."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        sub = parser.add_subparsers(dest="subcommand", required=True)
        verify = sub.add_parser(
            "verify-chain", help="recompute hash chains, report the first break"
        )
        verify.add_argument("--tenant", help="tenant slug (default: every chain)")
        verify.add_argument("--platform", action="store_true", help="only the platform chain")

    def handle(self, *args, **options) -> None:
        if options["subcommand"] == "verify-chain":
            self._verify(options)

    def _verify(self, options: dict) -> None:
        if options.get("tenant"):
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"unknown tenant {options['tenant']!r}")
            chains = [selectors.tenant_chain_name(tenant)]
        elif options.get("platform"):
            chains = [PLATFORM_CHAIN]
        else:
            chains = selectors.audit_chain_names_all_tenants()
        broken = 0
        for chain in chains:
            checked, problem = selectors.audit_chain_verify(chain)
            if problem is None:
                self.stdout.write(f"OK      {chain}: {checked} events")
            else:
                broken += 1
                self.stdout.write(f"BROKEN  {problem} (after {checked} good events)")
        if broken:
            raise CommandError(f"{broken} chain(s) broken")
        self.stdout.write(f"All {len(chains)} chain(s) intact.")
