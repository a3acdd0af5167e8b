"""Hash-chain primitives, free of Django so the offline verifier can use them.

Each event's hash is SHA-256 over the canonical JSON of its fields plus the previous
event's hash; any edit, deletion, insertion or reordering breaks a link that
``verify_chain`` names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

GENESIS_HASH = "0" * 64

# The fields covered by the hash, in the canonical record. Adding a field is a format
# change: bump HASH_VERSION and keep verifying old events with the old list.
HASHED_FIELDS = (
    "chain",
    "seq",
    "prev_hash",
    "occurred_at",
    "tenant_id",
    "actor_id",
    "actor_name",
    "auth_method",
    "key_id",
    "action",
    "target_type",
    "target_id",
    "outcome",
    "source_ip",
    "user_agent",
    "request_id",
    "changes",
    "details",
)
HASH_VERSION = 1


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def event_hash(record: dict[str, Any]) -> str:
    """The hash of one canonical record (a dict holding every HASHED_FIELDS key)."""
    payload = {name: record.get(name) for name in HASHED_FIELDS}
    payload["v"] = HASH_VERSION
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChainProblem:
    """The first broken link of a chain."""

    chain: str
    seq: int | None
    reason: str

    def __str__(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "end"
        return f"chain {self.chain}: {where}: {self.reason}"


def verify_chain(
    chain: str,
    records: Iterable[dict[str, Any]],
    *,
    start_seq: int = 1,
    start_prev_hash: str = GENESIS_HASH,
) -> tuple[int, ChainProblem | None]:
    """Walk records in order; return (records checked, first problem or None)."""
    expected_seq = start_seq
    prev_hash = start_prev_hash
    checked = 0
    for record in records:
        seq = record.get("seq")
        if record.get("chain") != chain:
            return checked, ChainProblem(
                chain, seq, f"record belongs to chain {record.get('chain')}"
            )
        if seq != expected_seq:
            reason = (
                f"sequence gap: expected {expected_seq}, found {seq}"
                if isinstance(seq, int) and seq > expected_seq
                else f"sequence out of order: expected {expected_seq}, found {seq}"
            )
            return checked, ChainProblem(chain, expected_seq, reason)
        if record.get("prev_hash") != prev_hash:
            return checked, ChainProblem(chain, seq, "prev_hash does not match the previous event")
        computed = event_hash(record)
        if computed != record.get("hash"):
            return checked, ChainProblem(chain, seq, "content does not match its hash (modified)")
        prev_hash = computed
        expected_seq += 1
        checked += 1
    return checked, None


def iter_chunks(iterable: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Yield lists of at most ``size`` items."""
    chunk: list[Any] = []
    for item in iterable:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
