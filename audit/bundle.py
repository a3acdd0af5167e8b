"""The audit export bundle format, free of Django (the offline verifier imports it).

A bundle is a zip holding:

- ``events.jsonl``: the canonical file. One JSON object per line, canonical JSON
  (sorted keys, no whitespace). For every chain it covers, every sequence number from the
  chain's first to its last exported event appears exactly once, in order: an event the
  filters select as its full canonical record (exactly what
  ``audit.selectors.audit_event_record`` returns, hashed fields plus ``hash``), any other
  event of that range as a *withheld* entry ``{chain, seq, prev_hash, hash, withheld:
  true}``. So continuity is checkable even for an export filtered by actor, action or
  outcome, without disclosing the content of events outside the filter.
- ``events.csv`` or ``events.ocsf.jsonl`` for those formats: a view of the selected
  events, one row per full record in the same order; the verifier re-renders each from
  the canonical record and compares.
- ``digests.jsonl``: per chain, the latest signed hourly digest whose head lies in the
  exported range (may be empty).
- ``manifest.json``: filters, counts, per-chain range and anchors, digest references and
  the SHA-256 of every other file, signed with Ed25519 over its canonical JSON.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from audit.chain import HASHED_FIELDS, canonical_json

if TYPE_CHECKING:
    from _csv import Reader, Writer

    from _typeshed import SupportsWrite

MANIFEST_KIND = "cacheplane.audit.export"
MANIFEST_VERSION = 1
DIGEST_KIND = "cacheplane.audit.digest"
DIGEST_VERSION = 1

FORMATS = ("jsonl", "csv", "ocsf")
MANIFEST_FILE = "manifest.json"
EVENTS_FILE = "events.jsonl"
DIGESTS_FILE = "digests.jsonl"
VIEW_FILES = {"csv": "events.csv", "ocsf": "events.ocsf.jsonl"}

#: The keys of a full canonical record (the hashed fields plus the hash).
RECORD_KEYS = frozenset(HASHED_FIELDS) | {"hash"}
#: The keys of a withheld entry.
WITHHELD_KEYS = frozenset({"chain", "seq", "prev_hash", "hash", "withheld"})

OUTCOMES = ("success", "denied", "failed")


def tenant_id_of_chain(chain: str) -> str | None:
    """``tenant:<id>`` → ``<id>``; the platform chain → None."""
    return chain.split(":", 1)[1] if chain.startswith("tenant:") else None


def parse_time(value: str) -> datetime:
    """An ISO 8601 time with an offset (``Z`` accepted); naive times are refused."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no UTC offset")
    return parsed


@dataclass(frozen=True)
class ExportFilters:
    """Which events an export discloses in full. ``since`` is inclusive, ``until``
    exclusive; ``actor`` matches the actor's id or name; ``action`` matches exactly, or
    as a prefix when it ends in ``*`` (``tenants.*``); ``outcome`` matches exactly."""

    since: datetime | None = None
    until: datetime | None = None
    actor: str | None = None
    action: str | None = None
    outcome: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "actor": self.actor,
            "action": self.action,
            "outcome": self.outcome,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExportFilters:
        return cls(
            since=parse_time(data["since"]) if data.get("since") else None,
            until=parse_time(data["until"]) if data.get("until") else None,
            actor=data.get("actor") or None,
            action=data.get("action") or None,
            outcome=data.get("outcome") or None,
        )

    def matches(self, record: dict[str, Any]) -> bool:
        """Whether a canonical record is selected (the same rule the database query
        uses to find each chain's range)."""
        if self.outcome is not None and record.get("outcome") != self.outcome:
            return False
        if self.action is not None:
            action = record.get("action")
            if not isinstance(action, str):
                return False
            if self.action.endswith("*"):
                if not action.startswith(self.action[:-1]):
                    return False
            elif action != self.action:
                return False
        if self.actor is not None and self.actor not in (
            record.get("actor_id"),
            record.get("actor_name"),
        ):
            return False
        if self.since is not None or self.until is not None:
            try:
                occurred = parse_time(str(record.get("occurred_at")))
            except ValueError:
                return False
            if self.since is not None and occurred < self.since:
                return False
            if self.until is not None and occurred >= self.until:
                return False
        return True


def withheld_entry(record: dict[str, Any]) -> dict[str, Any]:
    """The stand-in for an event inside an exported range that the filters exclude."""
    return {
        "chain": record["chain"],
        "seq": record["seq"],
        "prev_hash": record["prev_hash"],
        "hash": record["hash"],
        "withheld": True,
    }


def jsonl_line(entry: dict[str, Any]) -> str:
    return canonical_json(entry) + "\n"


# --- CSV view ---------------------------------------------------------------------------

# The hashed fields in their canonical order, with the links last (prev_hash, hash).
CSV_COLUMNS = (
    *(name for name in HASHED_FIELDS if name != "prev_hash"),
    "prev_hash",
    "hash",
)
# Spreadsheets evaluate cells starting with these as formulas (CSV injection); user
# agents, names and target ids are attacker-controlled, so such cells get a leading '.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return canonical_json(value)
    text = str(value)
    if text.startswith(_FORMULA_STARTS):
        return "'" + text
    return text


def csv_row(record: dict[str, Any]) -> list[str]:
    """One CSV row of a canonical record (a lossy view: None and "" both render empty)."""
    return [csv_cell(record.get(column)) for column in CSV_COLUMNS]


def csv_writer(stream: SupportsWrite[str]) -> Writer:
    return csv.writer(stream, lineterminator="\n")


def csv_reader(stream: Iterable[str]) -> Reader:
    return csv.reader(stream)


# --- Manifest and digests ----------------------------------------------------------------


def manifest_payload(manifest: dict[str, Any]) -> bytes:
    """The bytes the manifest signature covers: canonical JSON of all but ``signature``."""
    body = {key: value for key, value in manifest.items() if key != "signature"}
    return canonical_json(body).encode("utf-8")


DIGEST_SIGNED_FIELDS = (
    "kind",
    "v",
    "chain",
    "number",
    "hour",
    "head_seq",
    "head_hash",
    "prev_digest_hash",
    "created_at",
    "key_id",
)


def digest_payload(digest: dict[str, Any]) -> bytes:
    """The bytes a digest's signature and hash cover."""
    return canonical_json({name: digest.get(name) for name in DIGEST_SIGNED_FIELDS}).encode("utf-8")


def digest_hash(digest: dict[str, Any]) -> str:
    """SHA-256 of the digest's signed fields; the next digest of the chain links to it."""
    return hashlib.sha256(digest_payload(digest)).hexdigest()
