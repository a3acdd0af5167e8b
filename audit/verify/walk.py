"""The walk over ``events.jsonl``: hashes, links, anchors, and what is missing, duplicated
or out of order in each chain."""

from __future__ import annotations

import json
import re
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from audit.bundle import (
    RECORD_KEYS,
    WITHHELD_KEYS,
    ExportFilters,
    tenant_id_of_chain,
)
from audit.chain import event_hash
from audit.verify.report import Report

#: Withheld entries named one by one when an export should hold none.
_HIDDEN_NAMED_LIMIT = 1000

_SALVAGE_CHAIN = re.compile(r'"chain":"([^"]{1,64})"')
_SALVAGE_SEQ = re.compile(r'"seq":(\d{1,18})[,}]')


@dataclass
class _ChainWalk:
    """What the walk keeps per chain: a byte per sequence number (seen or not) and, for
    the order check, the sequence numbers in file order (8 bytes each)."""

    chain: str
    index: int
    first: int
    last: int
    first_prev_hash: Any
    last_hash: Any
    signed_records: Any
    signed_withheld: Any
    seen: bytearray = field(default_factory=bytearray)
    order: array[int] = field(default_factory=lambda: array("q"))
    lines: array[int] = field(default_factory=lambda: array("q"))
    duplicates: list[tuple[int, int]] = field(default_factory=list)
    prev_seq: int | None = None
    prev_hash: str | None = None
    prev_content_ok: bool = False
    prev_full: bool = False
    records: int = 0
    withheld: int = 0
    problems: int = 0
    withheld_seqs: list[int] = field(default_factory=list)


class EventsCheck:
    """Walks ``events.jsonl`` once; then names missing, duplicated and out-of-order
    entries per chain (the longest in-order run stays, the rest is named)."""

    def __init__(
        self,
        report: Report,
        manifest: dict[str, Any],
        filters: ExportFilters,
        anchors: dict[str, dict[int, tuple[str, str]]],
    ) -> None:
        self.report = report
        self.filters = filters
        self.anchors = anchors
        self.walks: dict[str, _ChainWalk] = {}
        for index, spec in enumerate(manifest["chains"]):
            walk = _ChainWalk(
                chain=spec["chain"],
                index=index,
                first=spec["first_seq"],
                last=spec["last_seq"],
                first_prev_hash=spec.get("first_prev_hash"),
                last_hash=spec.get("last_hash"),
                signed_records=spec["records"],
                signed_withheld=spec["withheld"],
            )
            walk.seen = bytearray(walk.last - walk.first + 1)
            self.walks[walk.chain] = walk
        self.highest_chain: _ChainWalk | None = None
        self.last_walk: _ChainWalk | None = None

    def _add(self, walk: _ChainWalk | None, kind: str, message: str, seq: int | None) -> None:
        if walk is not None:
            walk.problems += 1
        self.report.add(kind, message, walk.chain if walk else None, seq)

    def run(self, lines: Iterator[tuple[int, str]]) -> None:
        for number, text in lines:
            if not text.strip():
                self.report.add("inserted", f"line {number}: an empty line")
                continue
            try:
                entry = json.loads(text)
                if not isinstance(entry, dict):
                    raise ValueError("not an object")
            except ValueError:
                self._salvage(number, text)
                continue
            self._entry(number, entry)
        self._finish()

    def _salvage(self, number: int, text: str) -> None:
        """A line that is not JSON: name it from what is left of its chain and seq."""
        chain_match, seq_match = _SALVAGE_CHAIN.search(text), _SALVAGE_SEQ.search(text)
        walk = self.walks.get(chain_match.group(1)) if chain_match else None
        seq = int(seq_match.group(1)) if seq_match else None
        if walk is None or seq is None or not walk.first <= seq <= walk.last:
            self.report.add("modified", f"line {number}: not valid JSON (corrupted entry)")
            return
        self._add(walk, "modified", f"line {number}: not valid JSON (corrupted)", seq)
        self._place(walk, seq, number)
        # The hash of a corrupted entry is unknown: do not check the next link against it.
        walk.prev_seq, walk.prev_hash = seq, None

    def _entry(self, number: int, entry: dict[str, Any]) -> None:
        chain, seq = entry.get("chain"), entry.get("seq")
        walk = self.walks.get(chain) if isinstance(chain, str) else None
        if walk is None:
            self.report.add(
                "inserted",
                f"line {number}: a record of chain {chain!r}, which this export does not "
                "cover (spliced in from elsewhere)",
                chain if isinstance(chain, str) else None,
                seq if isinstance(seq, int) else None,
            )
            return
        if not isinstance(seq, int) or isinstance(seq, bool):
            self._add(walk, "modified", f"line {number}: sequence {seq!r} is not a number", None)
            return
        if not walk.first <= seq <= walk.last:
            self._add(
                walk,
                "inserted",
                f"line {number}: outside the signed range {walk.first}..{walk.last}",
                seq,
            )
            return
        withheld = entry.get("withheld") is True
        content_ok = self._content(walk, number, entry, withheld)
        if not self._place(walk, seq, number):
            return  # a second entry for a sequence number: named at the end
        if withheld:
            walk.withheld += 1
            if len(walk.withheld_seqs) < _HIDDEN_NAMED_LIMIT:
                walk.withheld_seqs.append(seq)
        else:
            walk.records += 1
        if content_ok:
            self._anchors(walk, seq, entry, withheld)
            if seq - 1 == walk.prev_seq and walk.prev_hash is not None:
                if entry.get("prev_hash") != walk.prev_hash:
                    self._broken_link(walk, seq, withheld)
        walk.prev_seq = seq
        walk.prev_hash = entry.get("hash") if isinstance(entry.get("hash"), str) else None
        walk.prev_content_ok = content_ok
        walk.prev_full = not withheld

    def _place(self, walk: _ChainWalk, seq: int, number: int) -> bool:
        """Note where ``seq`` appears; False when it was seen before (a duplicate)."""
        if self.highest_chain is not None and walk.index < self.highest_chain.index:
            self._add(
                walk,
                "reordered",
                f"line {number}: found among the entries of chain {self.highest_chain.chain}",
                seq,
            )
        elif self.highest_chain is None or walk.index > self.highest_chain.index:
            self.highest_chain = walk
        self.last_walk = walk
        offset = seq - walk.first
        if walk.seen[offset]:
            walk.duplicates.append((seq, number))
            return False
        walk.seen[offset] = 1
        walk.order.append(seq)
        walk.lines.append(number)
        return True

    def _content(
        self, walk: _ChainWalk, number: int, entry: dict[str, Any], withheld: bool
    ) -> bool:
        """Shape, hash and scope of one entry; True when its content is consistent."""
        seq = entry["seq"]
        keys = set(entry)
        expected_keys = WITHHELD_KEYS if withheld else RECORD_KEYS
        if keys != expected_keys:
            extra, absent = sorted(keys - expected_keys), sorted(expected_keys - keys)
            self._add(
                walk,
                "modified",
                f"line {number}: fields changed (unexpected {extra}, missing {absent})",
                seq,
            )
            return False
        if withheld:
            return True
        if event_hash(entry) != entry.get("hash"):
            self._add(walk, "modified", "content does not match its hash", seq)
            return False
        if entry.get("tenant_id") != tenant_id_of_chain(walk.chain):
            self._add(walk, "modified", "its tenant does not own this chain", seq)
            return False
        if not self.filters.matches(entry):
            self._add(walk, "unexpected", "a full record outside the export's filters", seq)
            return False
        return True

    def _anchors(self, walk: _ChainWalk, seq: int, entry: dict[str, Any], withheld: bool) -> None:
        """The signed first/last anchors and any digest head at this sequence."""
        what = "an altered withheld entry" if withheld else "replaced and re-hashed"
        if seq == walk.first and entry.get("prev_hash") != walk.first_prev_hash:
            self._add(
                walk, "modified", f"its prev_hash differs from the signed anchor ({what})", seq
            )
        if seq == walk.last and entry.get("hash") != walk.last_hash:
            self._add(walk, "modified", f"its hash differs from the signed anchor ({what})", seq)
        heads = self.anchors.get(walk.chain) or {}
        if seq in heads and entry.get("hash") != heads[seq][0]:
            self._add(
                walk,
                "digest",
                f"differs from {heads[seq][1]}: the chain was rewritten after that digest "
                "was signed",
                seq,
            )
        if seq == walk.first and seq - 1 in heads and entry.get("prev_hash") != heads[seq - 1][0]:
            self._add(
                walk,
                "digest",
                f"its prev_hash differs from {heads[seq - 1][1]}: the chain was rewritten "
                "after that digest was signed",
                seq,
            )

    def _broken_link(self, walk: _ChainWalk, seq: int, withheld: bool) -> None:
        if not withheld:
            # This record's own hash vouches for its prev_hash, so the previous entry is
            # the one whose hash changed.
            if walk.prev_full and not walk.prev_content_ok:
                return  # already named as modified
            self._add(
                walk,
                "modified",
                f"its hash is not the one seq {seq} links to (modified and re-hashed)",
                seq - 1,
            )
            return
        self._add(
            walk,
            "modified",
            f"the link from seq {seq - 1} is broken (seq {seq - 1} was re-hashed or this "
            "withheld entry was altered)",
            seq,
        )

    def _finish(self) -> None:
        ended_in = self.last_walk.index if self.last_walk else -1
        for walk in self.walks.values():
            total = walk.last - walk.first + 1
            if not walk.order:
                kind = "truncated" if walk.index > ended_in else "deleted"
                self._add(
                    walk,
                    kind,
                    f"all {total} entries (seq {walk.first}..{walk.last}) are missing",
                    walk.first,
                )
                continue
            self._out_of_order(walk)
            tail_cut = walk.index >= ended_in
            for low, high in _gaps(walk):
                if high == walk.last and tail_cut:
                    self._add(
                        walk,
                        "truncated",
                        f"the entries from seq {low} to {high} are missing at the end",
                        low,
                    )
                else:
                    self._add(walk, "deleted", _missing_text(low, high), low)
            self.report.records += walk.records
            self.report.withheld += walk.withheld
            if walk.problems == 0 and (walk.records, walk.withheld) != (
                walk.signed_records,
                walk.signed_withheld,
            ):
                self._hidden(walk)
            if walk.problems == 0:
                self.report.checks.append(
                    f"chain {walk.chain}: seq {walk.first}..{walk.last} contiguous "
                    f"({walk.records} records, {walk.withheld} withheld), anchors match"
                )
            walk.order, walk.lines, walk.seen = array("q"), array("q"), bytearray()
        self.report.chains = len(self.walks)

    def _out_of_order(self, walk: _ChainWalk) -> None:
        """Name duplicates, and the entries outside one longest increasing run of the
        chain's sequence numbers in file order (the fewest moves that explain it). An
        out-of-place entry whose sequence also appears in place is the inserted copy."""
        duplicated = {seq for seq, _ in walk.duplicates}
        keep = _longest_increasing(walk.order)
        for position, seq in enumerate(walk.order):
            if position in keep:
                continue
            line = walk.lines[position]
            if seq in duplicated:
                duplicated.discard(seq)
                self._add(walk, "inserted", f"line {line}: an extra copy, out of place", seq)
            else:
                self._add(walk, "reordered", f"line {line}: out of order (moved)", seq)
        for seq, number in walk.duplicates:
            if seq in duplicated:
                self._add(walk, "inserted", f"line {number}: a second entry for this sequence", seq)

    def _hidden(self, walk: _ChainWalk) -> None:
        """Every link holds but the split between full and withheld entries differs from
        the signed counts: a record was swapped for its withheld stand-in."""
        if walk.signed_withheld == 0 and walk.withheld_seqs:
            for seq in walk.withheld_seqs:
                self._add(walk, "modified", "a record was replaced by a withheld entry", seq)
            return
        self._add(
            walk,
            "modified",
            f"{walk.records} records and {walk.withheld} withheld entries, but the manifest "
            f"signed {walk.signed_records} and {walk.signed_withheld}: a record was replaced "
            "by a withheld entry",
            None,
        )


def _gaps(walk: _ChainWalk) -> Iterator[tuple[int, int]]:
    """Ranges of sequence numbers never seen."""
    offset, size = 0, len(walk.seen)
    while True:
        offset = walk.seen.find(0, offset)
        if offset < 0:
            return
        end = walk.seen.find(1, offset)
        end = size if end < 0 else end
        yield walk.first + offset, walk.first + end - 1
        offset = end


def _longest_increasing(values: array[int]) -> set[int] | range:
    """Positions of one longest strictly increasing subsequence (patience sorting)."""
    if all(values[i] < values[i + 1] for i in range(len(values) - 1)):
        return range(len(values))  # the common case, in one pass
    tails: list[int] = []  # value at the end of the best run of each length
    tail_positions: list[int] = []
    previous = array("q", [-1]) * len(values)
    for position, value in enumerate(values):
        length = bisect_left(tails, value)
        if length == len(tails):
            tails.append(value)
            tail_positions.append(position)
        else:
            tails[length] = value
            tail_positions[length] = position
        previous[position] = tail_positions[length - 1] if length else -1
    keep: set[int] = set()
    position = tail_positions[-1] if tail_positions else -1
    while position >= 0:
        keep.add(position)
        position = previous[position]
    return keep


def _missing_text(low: int, high: int) -> str:
    if low == high:
        return "missing (deleted)"
    return f"seq {low}..{high} missing ({high - low + 1} entries deleted)"
