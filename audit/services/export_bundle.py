"""Writing one export's bundle: events.jsonl (+ CSV/OCSF view) streamed from the chains,
digests.jsonl, the signed manifest, zipped. Constant memory: one event at a time, files
hashed as they are written, the zip streamed from disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.utils import timezone

from audit import selectors
from audit.bundle import (
    CSV_COLUMNS,
    DIGESTS_FILE,
    EVENTS_FILE,
    MANIFEST_FILE,
    MANIFEST_KIND,
    MANIFEST_VERSION,
    VIEW_FILES,
    ExportFilters,
    csv_row,
    csv_writer,
    jsonl_line,
    manifest_payload,
    withheld_entry,
)
from audit.chain import HASH_VERSION, canonical_json
from audit.models import AuditExport
from audit.ocsf import OCSF_VERSION, ocsf_event
from audit.signing import ALGORITHM, Signer

#: Progress (and the liveness heartbeat) is reported every this many events.
PROGRESS_EVERY = 5000
ZIP_COMPRESSLEVEL = 6


@dataclass(frozen=True)
class WrittenBundle:
    """The finished zip and what the export row records about it."""

    path: Path
    size: int
    sha256: str
    records: int
    withheld: int
    manifest: dict[str, Any]


def export_bundle_write(
    *,
    export: AuditExport,
    filters: ExportFilters,
    segments: list[selectors.ChainSegment],
    signer: Signer,
    heartbeat: Callable[[int], None],
) -> WrittenBundle:
    """Write ``<export dir>/<id>.zip`` (through a private work folder, then an atomic
    rename); ``heartbeat(processed)`` is called every PROGRESS_EVERY events."""
    root = selectors.export_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    work = root / f".{export.pk}.partial"
    shutil.rmtree(work, ignore_errors=True)  # a dead attempt's leftovers
    work.mkdir(mode=0o700)
    try:
        chains, files, counts = _write_events(export, filters, segments, work, heartbeat)
        digests = _write_digests(segments, work)
        files.append(digests.pop("file"))
        manifest = _manifest(export, filters, chains, digests["refs"], files, counts, signer)
        (work / MANIFEST_FILE).write_text(
            json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
            encoding="utf-8",
        )
        names = [MANIFEST_FILE, *(f["name"] for f in files)]
        bundle = _zip(work, root / f"{export.pk}.zip", names)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        (root / f"{export.pk}.zip.partial").unlink(missing_ok=True)
    return WrittenBundle(
        path=bundle,
        size=bundle.stat().st_size,
        sha256=_file_sha256(bundle),
        records=counts["records"],
        withheld=counts["withheld"],
        manifest=manifest,
    )


class _HashingFile:
    """A write-only UTF-8 file that hashes what it writes (no second read pass)."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self._file = path.open("wb", buffering=1 << 20)
        self._sha256 = hashlib.sha256()
        self.size = 0

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        self._sha256.update(data)
        self._file.write(data)
        self.size += len(data)
        return len(text)

    def close(self) -> dict[str, Any]:
        self._file.close()
        return {"name": self.name, "sha256": self._sha256.hexdigest(), "bytes": self.size}


def _write_events(
    export: AuditExport,
    filters: ExportFilters,
    segments: list[selectors.ChainSegment],
    work: Path,
    heartbeat: Callable[[int], None],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]:
    """Stream every segment into events.jsonl (and the view), one event at a time."""
    events = _HashingFile(work / EVENTS_FILE)
    view_name = VIEW_FILES.get(export.format)
    view = _HashingFile(work / view_name) if view_name else None
    write_view: Callable[[dict[str, Any]], Any] | None = None
    if view is not None and export.format == "csv":
        writer = csv_writer(view)
        writer.writerow(list(CSV_COLUMNS))

        def write_view(record: dict[str, Any]) -> Any:
            return writer.writerow(csv_row(record))

    elif view is not None:

        def write_view(record: dict[str, Any]) -> Any:
            return view.write(canonical_json(ocsf_event(record)) + "\n")

    chains: list[dict[str, Any]] = []
    counts = {"records": 0, "withheld": 0}
    processed = 0
    try:
        for segment in segments:
            spec: dict[str, Any] = {
                "chain": segment.chain,
                "first_seq": segment.first_seq,
                "last_seq": segment.last_seq,
                "first_prev_hash": None,
                "last_hash": None,
                "records": 0,
                "withheld": 0,
            }
            for event in selectors.audit_chain_segment_events(
                chain=segment.chain, first_seq=segment.first_seq, last_seq=segment.last_seq
            ):
                record = selectors.audit_event_record(event)
                if spec["first_prev_hash"] is None:
                    spec["first_prev_hash"] = record["prev_hash"]
                spec["last_hash"] = record["hash"]
                if filters.matches(record):
                    events.write(jsonl_line(record))
                    if write_view is not None:
                        write_view(record)
                    spec["records"] += 1
                else:
                    events.write(jsonl_line(withheld_entry(record)))
                    spec["withheld"] += 1
                processed += 1
                if processed % PROGRESS_EVERY == 0:
                    heartbeat(processed)
            counts["records"] += spec["records"]
            counts["withheld"] += spec["withheld"]
            chains.append(spec)
    finally:
        files = [events.close()]
        if view is not None:
            files.append(view.close())
    counts["chains"] = len(chains)
    return chains, files, counts


def _write_digests(segments: list[selectors.ChainSegment], work: Path) -> dict[str, Any]:
    """Per chain, the latest digest whose head lies in the exported range."""
    out = _HashingFile(work / DIGESTS_FILE)
    refs: list[dict[str, Any]] = []
    try:
        for segment in segments:
            digest = selectors.audit_digest_latest_covering(
                chain=segment.chain, first_seq=segment.first_seq, last_seq=segment.last_seq
            )
            if digest is None:
                continue
            out.write(jsonl_line(selectors.audit_digest_record(digest)))
            refs.append(
                {
                    "chain": digest.chain,
                    "number": digest.number,
                    "head_seq": digest.head_seq,
                    "digest_hash": digest.digest_hash,
                }
            )
    finally:
        file = out.close()
    return {"file": file, "refs": refs}


def _manifest(
    export: AuditExport,
    filters: ExportFilters,
    chains: list[dict[str, Any]],
    digests: list[dict[str, Any]],
    files: list[dict[str, Any]],
    counts: dict[str, int],
    signer: Signer,
) -> dict[str, Any]:
    if export.tenant is not None:
        scope = {
            "type": "tenant",
            "tenant_id": str(export.tenant.pk),
            "tenant_slug": export.tenant.slug,
        }
    else:
        scope = {
            "type": "platform",
            "tenant_id": export.filters.get("tenant_id"),
            "tenant_slug": export.filters.get("tenant_slug"),
        }
    manifest: dict[str, Any] = {
        "kind": MANIFEST_KIND,
        "version": MANIFEST_VERSION,
        "export_id": str(export.pk),
        "created_at": export.created_at.isoformat(),
        "generated_at": timezone.now().isoformat(),
        "requested_by": {
            "principal_id": str(export.requested_by_id) if export.requested_by_id else None,
            "name": export.requested_by_name,
        },
        "scope": scope,
        "format": export.format,
        "filters": filters.to_json(),
        "hash_version": HASH_VERSION,
        "count": counts,
        "chains": chains,
        "digests": digests,
        "files": files,
        "signing_key": {
            "kid": signer.kid,
            "algorithm": ALGORITHM,
            "public_key_sha256": signer.fingerprint,
        },
    }
    if export.format == "ocsf":
        manifest["ocsf_version"] = OCSF_VERSION
    manifest["signature"] = {
        "kid": signer.kid,
        "algorithm": ALGORITHM,
        "value": signer.sign(manifest_payload(manifest)),
    }
    return manifest


def _zip(work: Path, target: Path, names: list[str]) -> Path:
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(
        partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=ZIP_COMPRESSLEVEL
    ) as archive:
        for name in names:
            archive.write(work / name, arcname=name)  # streamed from disk in blocks
    os.chmod(partial, 0o600)
    os.replace(partial, target)
    return target


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
