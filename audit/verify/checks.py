"""Manifest, signature, files, digests and views; ``verify_bundle`` runs them all."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any, TextIO

from audit.bundle import (
    CSV_COLUMNS,
    DIGEST_KIND,
    DIGESTS_FILE,
    EVENTS_FILE,
    MANIFEST_FILE,
    MANIFEST_KIND,
    VIEW_FILES,
    ExportFilters,
    csv_reader,
    csv_row,
    digest_hash,
    digest_payload,
    manifest_payload,
)
from audit.chain import canonical_json
from audit.errors import (
    BundleUnreadable,
    PublicKeyMismatch,
    PublicKeyMissing,
)
from audit.ocsf import ocsf_event
from audit.signing import KeySet, signature_valid
from audit.verify.reading import (
    MAX_MANIFEST_BYTES,
    ZIP_ERRORS,
    Bundle,
    file_sha256,
    parsed_lines,
    read_lines,
)
from audit.verify.report import Report
from audit.verify.walk import EventsCheck

#: Row-level findings reported per view file before summarising the rest.
VIEW_FINDINGS_LIMIT = 20


def _check_digests(
    report: Report, bundle: Bundle, manifest: dict[str, Any], keys: KeySet
) -> dict[str, dict[int, tuple[str, str]]]:
    """Verify each digest; return chain → {head_seq: (head_hash, label)} of the good ones."""
    anchors: dict[str, dict[int, tuple[str, str]]] = {}
    referenced = {
        (ref.get("chain"), ref.get("number"), ref.get("digest_hash"))
        for ref in manifest.get("digests") or []
        if isinstance(ref, dict)
    }
    found: set[tuple[Any, Any, Any]] = set()
    try:
        lines = list(read_lines(bundle, DIGESTS_FILE))
    except KeyError:
        if referenced:
            report.add("file", f"{DIGESTS_FILE} is missing")
        return anchors
    for number, text in lines:
        try:
            digest = json.loads(text)
            if not isinstance(digest, dict):
                raise ValueError
        except ValueError:
            report.add("digest", f"{DIGESTS_FILE} line {number}: not valid JSON")
            continue
        chain, label = digest.get("chain"), f"digest #{digest.get('number')} ({digest.get('hour')})"
        found.add((chain, digest.get("number"), digest.get("digest_hash")))
        problem = digest_problem(digest, keys)
        if problem:
            report.add("digest", f"{label}: {problem}", chain if isinstance(chain, str) else None)
            continue
        if isinstance(chain, str):  # a chain-less key would match no chain's entries anyway
            anchors.setdefault(chain, {})[digest["head_seq"]] = (digest["head_hash"], label)
        head = digest["head_seq"]
        report.checks.append(f"chain {chain}: {label} signature valid, head seq {head}")
    for ref_chain, ref_number, _ in sorted(referenced - found, key=str):
        report.add("digest", f"digest #{ref_number} named by the manifest is missing", ref_chain)
    for ref_chain, ref_number, _ in sorted(found - referenced, key=str):
        report.add("digest", f"digest #{ref_number} is not named by the manifest", ref_chain)
    return anchors


def digest_problem(digest: dict[str, Any], keys: KeySet) -> str | None:
    """What is wrong with one digest (hash or signature), or None."""
    if digest.get("kind") != DIGEST_KIND:
        return "not a Cacheplane audit digest"
    if digest_hash(digest) != digest.get("digest_hash"):
        return "its content does not match its digest hash (modified)"
    key = keys.find(digest.get("key_id"))
    if key is None and keys.anonymous is not None:
        key = keys.anonymous
    if key is None:
        return f"signed with key {digest.get('key_id')!r}, which is not among the given keys"
    if not signature_valid(key, digest_payload(digest), digest.get("signature")):
        return "its signature does not verify (modified, or signed by another key)"
    return None


def _check_view(report: Report, bundle: Bundle, view: str, fmt: str) -> None:
    """Re-render each full canonical record and compare with the view, row by row."""
    records = (
        entry for entry in parsed_lines(bundle, EVENTS_FILE) if entry.get("withheld") is not True
    )
    problems = 0
    with bundle.open(view) as raw:
        text_stream: TextIO = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
        rows: Iterator[Any]
        if fmt == "csv":
            reader = csv_reader(text_stream)
            header = next(reader, None)
            if header is None or tuple(header) != CSV_COLUMNS:
                report.add("view", f"{view}: the header row was changed")
                problems += 1
            rows = reader
        else:
            rows = (line[:-1] if line.endswith("\n") else line for line in text_stream)
        for index, (record, row) in enumerate(zip_longest(records, rows), start=1):
            if record is None:
                report.add("view", f"{view} row {index}: a row with no canonical record")
                problems += 1
                break
            if row is None:
                report.add("view", f"{view}: rows from {index} on are missing")
                problems += 1
                break
            rendered = csv_row(record) if fmt == "csv" else canonical_json(ocsf_event(record))
            if rendered != row:
                problems += 1
                if problems <= VIEW_FINDINGS_LIMIT:
                    report.add(
                        "view",
                        f"{view} row {index} differs from the canonical record",
                        record.get("chain"),
                        record.get("seq"),
                    )
    if problems > VIEW_FINDINGS_LIMIT:
        report.add("view", f"{view}: {problems - VIEW_FINDINGS_LIMIT} more rows differ")
    if problems == 0:
        report.checks.append(f"{view}: every row matches its canonical record")


def _check_signature(report: Report, manifest: dict[str, Any], keys: KeySet) -> None:
    signing_key = manifest.get("signing_key") or {}
    signature = manifest.get("signature") or {}
    kid, fingerprint = signing_key.get("kid"), signing_key.get("public_key_sha256")
    key = keys.find(kid, fingerprint)
    if key is None:
        raise PublicKeyMismatch(
            f"the export names signing key {kid!r} (sha256 {fingerprint}), which is not "
            f"among the given public keys [{keys.describe()}]: pass the deployment's key "
            "(GET /api/v1/audit/signing-keys), or the manifest was altered"
        )
    if signature.get("kid") != kid or not signature_valid(
        key, manifest_payload(manifest), signature.get("value")
    ):
        report.add(
            "signature",
            "the manifest signature does not verify: the manifest was altered (or the "
            "signature was)",
        )
        return
    report.checks.append(f"manifest signature valid (Ed25519, key {kid}, sha256 {fingerprint})")


def _check_files(report: Report, bundle: Bundle, manifest: dict[str, Any]) -> set[str]:
    """SHA-256 of every listed file; returns the names whose content is as signed."""
    good: set[str] = set()
    listed: set[str] = set()
    for item in manifest.get("files") or []:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            report.add("manifest", "a file entry has no name")
            continue
        listed.add(name)
        try:
            with bundle.open(name) as stream:
                digest, size = file_sha256(stream)
        except KeyError:
            report.add("file", f"{name} is missing")
            continue
        if digest != item.get("sha256") or size != item.get("bytes"):
            report.add("file", f"{name}: its SHA-256 differs from the signed manifest (changed)")
            continue
        good.add(name)
    names = bundle.names()
    for name in sorted(n for n, copies in Counter(names).items() if copies > 1):
        # Tools disagree on which copy of a duplicated zip member they show.
        report.add("file", f"{name} appears more than once in the archive (added)")
    for name in sorted(set(names) - listed - {MANIFEST_FILE}):
        report.add("file", f"{name} is not listed in the manifest (added)")
    if good == listed:
        report.checks.append(f"{len(listed)} file(s) match their signed SHA-256")
    return good


def verify_bundle(path: Path, keys: KeySet) -> Report:
    """Verify one export bundle against trusted public keys (raises VerificationError
    when it cannot run: unreadable bundle, or no matching key)."""
    if len(keys) == 0:
        raise PublicKeyMissing("no public key given")
    bundle = Bundle(path)
    try:
        return _verify_open_bundle(path, bundle, keys)
    except ZIP_ERRORS as exc:
        if bundle.is_zip:
            # A damaged archive (bad CRC, broken deflate stream, garbage header): nothing
            # in it can be trusted or reported on, so the verifier cannot run.
            raise BundleUnreadable(f"{path} is a damaged zip archive ({exc})") from None
        raise
    finally:
        bundle.close()


def _verify_open_bundle(path: Path, bundle: Bundle, keys: KeySet) -> Report:
    report = Report()
    try:
        with bundle.open(MANIFEST_FILE) as stream:
            raw_manifest = stream.read(MAX_MANIFEST_BYTES + 1)
        if len(raw_manifest) > MAX_MANIFEST_BYTES:
            raise BundleUnreadable(f"{MANIFEST_FILE} is larger than any real manifest")
        manifest = json.loads(raw_manifest.decode("utf-8"))
    except KeyError:
        raise BundleUnreadable(f"{path} holds no {MANIFEST_FILE}") from None
    except (ValueError, UnicodeDecodeError):
        report.add("manifest", f"{MANIFEST_FILE} is not valid JSON (altered)")
        return report
    if not isinstance(manifest, dict) or manifest.get("kind") != MANIFEST_KIND:
        report.add("manifest", f"{MANIFEST_FILE} is not a Cacheplane audit export manifest")
        return report
    _check_signature(report, manifest, keys)
    try:
        filters = ExportFilters.from_json(manifest.get("filters") or {})
        _check_chain_specs(manifest)
    except (KeyError, TypeError, ValueError, AttributeError):
        report.add("manifest", "the manifest's filters or chain list are malformed")
        return report
    _check_scope(report, manifest)
    _check_files(report, bundle, manifest)
    anchors = _check_digests(report, bundle, manifest, keys)
    try:
        EventsCheck(report, manifest, filters, anchors).run(read_lines(bundle, EVENTS_FILE))
    except KeyError:
        report.add("file", f"{EVENTS_FILE} is missing")
    _check_totals(report, manifest)
    fmt = manifest.get("format")
    view = VIEW_FILES.get(fmt) if isinstance(fmt, str) else None
    if view is not None and isinstance(fmt, str) and {view, EVENTS_FILE} <= set(bundle.names()):
        if any(f.kind in _RECORD_KINDS for f in report.findings):
            report.checks.append(f"{view}: not compared, the canonical file is damaged")
        else:
            _check_view(report, bundle, view, fmt)
    return report


_RECORD_KINDS = frozenset(
    {"modified", "deleted", "inserted", "reordered", "truncated", "unexpected"}
)


def _check_chain_specs(manifest: dict[str, Any]) -> None:
    """Raise ValueError unless every chain entry has the types the walk relies on."""
    chains = manifest.get("chains")
    if not isinstance(chains, list):
        raise ValueError("chains")
    names: set[str] = set()
    for spec in chains:
        if not isinstance(spec, dict) or not isinstance(spec.get("chain"), str):
            raise ValueError("chain")
        for name in ("first_seq", "last_seq", "records", "withheld"):
            value = spec.get(name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(name)
        if spec["first_seq"] > spec["last_seq"] or spec["chain"] in names:
            raise ValueError("range")
        names.add(spec["chain"])


def _check_scope(report: Report, manifest: dict[str, Any]) -> None:
    scope = manifest.get("scope")
    if not isinstance(scope, dict) or scope.get("type") != "tenant":
        return
    own = f"tenant:{scope.get('tenant_id')}"
    for spec in manifest["chains"]:
        if spec["chain"] != own:
            report.add("manifest", "a tenant export lists another chain", spec["chain"])


def _check_totals(report: Report, manifest: dict[str, Any]) -> None:
    count = manifest.get("count")
    chains = manifest["chains"]
    signed = (sum(c["records"] for c in chains), sum(c["withheld"] for c in chains))
    if not isinstance(count, dict) or (count.get("records"), count.get("withheld")) != signed:
        report.add("manifest", "the manifest's totals disagree with its chain list")
