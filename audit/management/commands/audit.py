"""``cacheplane audit ...``: audit log tools.

- ``verify-chain [--tenant SLUG | --platform]``: recompute hash chains from the database.
- ``verify PATH --public-key FILE``: verify an export bundle offline. It touches no
  database (``cacheplane audit verify`` even runs without Django, see controlplane/cli.py).
- ``verify-digests [--tenant SLUG | --platform]``: check the signed digests against each
  other and against the chains now in the database.
- ``export (--tenant SLUG | --platform) --format F [filters] [--output FILE]``: produce
  an export here, with a progress bar (an operator at the shell: audited as ``cli``, no
  role check).
- ``digest``: sign every chain head that moved (what the hourly beat job fans out).
- ``signing-keys``: print the published public keys as JSON (for ``--public-key``).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit import selectors, verify
from audit.bundle import FORMATS, parse_time
from audit.models import PLATFORM_CHAIN
from controlplane.errors import DomainError
from tenants.actor import Actor
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Audit log tools."
    # `verify` must work against a bundle alone; nothing here needs the checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True)
        chain = sub.add_parser("verify-chain", help="recompute hash chains, report the first break")
        chain.add_argument("--tenant", help="tenant slug (default: every chain)")
        chain.add_argument("--platform", action="store_true", help="only the platform chain")

        offline = sub.add_parser("verify", help="verify an export bundle offline (no database)")
        verify.add_arguments(offline)

        digests = sub.add_parser("verify-digests", help="check signed digests against the chains")
        digests.add_argument("--tenant", help="tenant slug (default: every chain)")
        digests.add_argument("--platform", action="store_true", help="only the platform chain")

        export = sub.add_parser("export", help="produce a signed export here (with progress)")
        scope = export.add_mutually_exclusive_group(required=True)
        scope.add_argument("--tenant", help="export this tenant's chain")
        scope.add_argument("--platform", action="store_true", help="every chain")
        export.add_argument("--format", choices=FORMATS, default="jsonl")
        export.add_argument("--since", help="ISO time with offset (inclusive)")
        export.add_argument("--until", help="ISO time with offset (exclusive; default: now)")
        export.add_argument("--actor", help="principal id or name")
        export.add_argument("--action", help="action, or a prefix ending in '*'")
        export.add_argument("--outcome", choices=("success", "denied", "failed"))
        export.add_argument("--output", help="copy the bundle (zip) here")
        export.add_argument("--no-progress", action="store_true", help="no progress bar")

        sub.add_parser("digest", help="sign every chain head that moved since its last digest")
        keys = sub.add_parser("signing-keys", help="print the published public keys (JSON)")
        keys.add_argument("--output", help="write them to this file instead")

    def handle(self, *args: Any, **options: Any) -> None:
        command = options["subcommand"]
        if command == "verify":
            self._verify_bundle(options)
        elif command == "verify-chain":
            self._verify(options)
        elif command == "verify-digests":
            self._verify_digests(options)
        elif command == "export":
            self._export(options)
        elif command == "digest":
            self._digest()
        elif command == "signing-keys":
            self._signing_keys(options)

    # --- verify (offline) -----------------------------------------------------------------

    def _verify_bundle(self, options: dict[str, Any]) -> None:
        status = verify.run(
            options["path"],
            options.get("public_key"),
            as_json=options.get("json", False),
            out=self.stdout,
            err=self.stderr,
        )
        if status != verify.EXIT_INTACT:
            raise CommandError(
                "the export is not intact" if status == verify.EXIT_TAMPERED else "cannot verify",
                returncode=status,
            )

    # --- verify-chain ---------------------------------------------------------------------

    def _chains(self, options: dict[str, Any], all_chains: list[str]) -> list[str]:
        if options.get("tenant"):
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"unknown tenant {options['tenant']!r}")
            return [selectors.tenant_chain_name(tenant)]
        if options.get("platform"):
            return [PLATFORM_CHAIN]
        return all_chains

    def _verify(self, options: dict[str, Any]) -> None:
        chains = self._chains(options, selectors.audit_chain_names_all_tenants())
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

    def _verify_digests(self, options: dict[str, Any]) -> None:
        chains = self._chains(options, selectors.audit_digest_chain_names_all_tenants())
        broken = 0
        for chain in chains:
            checked, problems = selectors.audit_digest_chain_verify(chain)
            if not problems:
                self.stdout.write(f"OK      {chain}: {checked} digest(s) match the chain")
                continue
            broken += 1
            for problem in problems:
                self.stdout.write(f"BROKEN  {chain}: {problem}")
        if broken:
            raise CommandError(f"{broken} chain(s) contradict their signed digests")
        self.stdout.write(f"All {len(chains)} digest chain(s) intact.")

    # --- export ---------------------------------------------------------------------------

    def _export(self, options: dict[str, Any]) -> None:
        from audit.services.exports import ExportRequest, audit_export_create, audit_export_run

        tenant = None
        if options.get("tenant"):
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"unknown tenant {options['tenant']!r}")
        try:
            request = ExportRequest(
                format=options["format"],
                since=_time(options.get("since"), "--since"),
                until=_time(options.get("until"), "--until"),
                actor=options.get("actor"),
                action=options.get("action"),
                outcome=options.get("outcome"),
            )
            export = audit_export_create(
                tenant=tenant, actor=Actor.cli(), request=request, enqueue=False
            )
        except DomainError as exc:
            raise CommandError(f"[{exc.code}] {exc.message}") from None
        bar = None if options.get("no_progress") else ProgressBar(sys.stderr)
        export = audit_export_run(export=export, progress=bar)
        if bar is not None:
            bar.close()
        if export.status != "succeeded":
            raise CommandError(f"export failed: [{export.error_code}] {export.error_message}")
        path = selectors.export_dir() / export.file_name
        if options.get("output"):
            shutil.copyfile(path, options["output"])
            path = Path(options["output"])
        self.stdout.write(
            f"Export {export.pk}: {export.records} records ({export.withheld} withheld) "
            f"→ {path} (sha256 {export.file_sha256})"
        )

    # --- digests and keys -----------------------------------------------------------------

    def _digest(self) -> None:
        from django.utils import timezone

        from audit.services.digests import audit_digest_create_batch, audit_digest_hour

        chains = selectors.audit_digest_chains_due_all_tenants()
        made = audit_digest_create_batch(hour=audit_digest_hour(timezone.now()), chains=chains)
        for d in made:
            self.stdout.write(f"SIGNED  {d.chain}: digest #{d.number} at seq {d.head_seq}")
        skipped = len(chains) - len(made)
        self.stdout.write(f"{len(made)} digest(s) made; {skipped} chain(s) skipped.")

    def _signing_keys(self, options: dict[str, Any]) -> None:
        keys = [
            {
                "kid": key.kid,
                "algorithm": key.algorithm,
                "public_key": key.public_key,
                "public_key_sha256": key.fingerprint,
                "created_at": key.created_at.isoformat() if key.created_at else None,
                "retired_at": key.retired_at.isoformat() if key.retired_at else None,
                "active": key.active,
            }
            for key in selectors.audit_signing_key_list()
        ]
        text = json.dumps({"keys": keys}, indent=2) + "\n"
        if options.get("output"):
            Path(options["output"]).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")


def _time(value: str | None, flag: str) -> Any:
    if not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        raise CommandError(f"{flag}: expected an ISO time with an offset, got {value!r}") from None


class ProgressBar:
    """A dependency-free progress bar on stderr: redrawn in place on a terminal, a line
    per 10 % otherwise (logs)."""

    WIDTH = 30

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self.last_draw = 0.0
        self.last_decile = -1

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        fraction = done / total if total else 1.0
        rate = done / max(now - self.started, 1e-6)
        if self.tty:
            if now - self.last_draw < 0.2 and done < total:
                return
            filled = int(self.WIDTH * fraction)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            self.stream.write(f"\r[{bar}] {fraction:6.1%} {done}/{total} {rate:,.0f} ev/s")
            self.stream.flush()
            self.last_draw = now
        elif int(fraction * 10) > self.last_decile:
            self.last_decile = int(fraction * 10)
            self.stream.write(f"export {fraction:.0%} ({done}/{total}, {rate:,.0f} ev/s)\n")

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
