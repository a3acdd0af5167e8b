"""``cacheplane audit verify PATH --public-key FILE``: load keys, verify, print, exit."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from audit.errors import (
    PublicKeyInvalid,
    PublicKeyMissing,
    VerificationError,
)
from audit.signing import KeyFormatError, KeySet, keyset_parse
from audit.verify.checks import verify_bundle

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

EXIT_INTACT = 0
EXIT_TAMPERED = 1
EXIT_ERROR = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the export zip (or a folder holding its files)")
    parser.add_argument(
        "--public-key",
        dest="public_key",
        help="the deployment's public key: a PEM file, or the JSON of "
        "GET /api/v1/audit/signing-keys (needed for key rotation)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def load_keys(path: str | None) -> KeySet:
    """Read ``--public-key``; raises PublicKeyMissing / PublicKeyInvalid."""
    if not path:
        raise PublicKeyMissing(
            "no public key given: pass --public-key FILE (a PEM file, or the JSON of "
            "GET /api/v1/audit/signing-keys); an export cannot be trusted without it"
        )
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PublicKeyInvalid(f"cannot read the public key file {path}: {exc}") from None
    try:
        return keyset_parse(text)
    except KeyFormatError as exc:
        raise PublicKeyInvalid(f"{path}: {exc}") from None


def run(
    path: str,
    public_key: str | None,
    *,
    as_json: bool,
    out: SupportsWrite[str],
    err: SupportsWrite[str],
) -> int:
    """Verify and print; return the exit status (0 intact, 1 tampered, 2 error)."""
    try:
        keys = load_keys(public_key)
        report = verify_bundle(Path(path), keys)
    except VerificationError as exc:
        if as_json:
            out.write(json.dumps({"error": {"code": exc.code, "message": exc.message}}) + "\n")
        err.write(f"cacheplane audit verify: error [{exc.code}]: {exc.message}\n")
        return EXIT_ERROR
    if as_json:
        out.write(json.dumps(report.as_json(), indent=2) + "\n")
    else:
        for line in report.checks:
            out.write(f"OK         {line}\n")
        for finding in report.findings:
            out.write(f"{finding}\n")
        if report.intact:
            out.write(
                f"INTACT: {report.records} records ({report.withheld} withheld) in "
                f"{report.chains} chain(s) verified.\n"
            )
        else:
            out.write(f"TAMPERED: {len(report.findings)} problem(s) found.\n")
    return EXIT_INTACT if report.intact else EXIT_TAMPERED


def main(argv: list[str] | None = None) -> int:
    """``cacheplane audit verify PATH [--public-key FILE] [--json]`` without Django."""
    parser = argparse.ArgumentParser(
        prog="cacheplane audit verify", description="Verify a signed audit export offline."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args.path, args.public_key, as_json=args.json, out=sys.stdout, err=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
