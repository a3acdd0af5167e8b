"""Offline verification of an audit export bundle: no database, no Django.

``cacheplane audit verify PATH --public-key FILE`` (PATH: the downloaded zip or a folder
holding its files). It checks, in order:

1. the manifest's Ed25519 signature, with the key the manifest names (by key id, or by
   fingerprint for a bare PEM key);
2. the SHA-256 of every file against the signed manifest;
3. each signed digest (hash and signature) the bundle carries;
4. ``events.jsonl`` entry by entry: every full record's hash is recomputed (``audit/
   chain.py``), every ``prev_hash`` link is followed, each chain must run contiguously
   from its signed first to its signed last sequence with the signed anchors at both
   ends, and each digest head inside the range must match;
5. the CSV/OCSF view, row by row, against a re-rendering of the canonical records.

Findings name the chain and sequence and say what happened: modified (content or hash
changed), deleted (a sequence number missing), inserted (a duplicate, a sequence outside
the signed range, a record of a chain the export does not cover), reordered (a record
found after a later one) or truncated (the file ends early). Exit status: 0 intact, 1
tampered, 2 the verifier could not run (no or wrong public key, unreadable bundle).
"""

from audit.verify.checks import VIEW_FINDINGS_LIMIT, digest_problem, verify_bundle
from audit.verify.cli import (
    EXIT_ERROR,
    EXIT_INTACT,
    EXIT_TAMPERED,
    add_arguments,
    load_keys,
    main,
    run,
)
from audit.verify.reading import Bundle
from audit.verify.report import Finding, Report

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTACT",
    "EXIT_TAMPERED",
    "VIEW_FINDINGS_LIMIT",
    "Bundle",
    "Finding",
    "Report",
    "add_arguments",
    "digest_problem",
    "load_keys",
    "main",
    "run",
    "verify_bundle",
]
