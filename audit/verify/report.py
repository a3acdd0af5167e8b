"""What the verifier found: findings and the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One problem: ``kind`` is modified, deleted, inserted, reordered, truncated,
    unexpected, signature, file, manifest, digest, view or key."""

    kind: str
    message: str
    chain: str | None = None
    seq: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.chain is not None:
            where = f"chain {self.chain}"
            if self.seq is not None:
                where += f" seq {self.seq}"
            where += ": "
        return f"{self.kind.upper():<10} {where}{self.message}"

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "chain": self.chain, "seq": self.seq, "message": self.message}


@dataclass
class Report:
    """What the verifier found; ``intact`` only when there is no finding at all."""

    findings: list[Finding] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    records: int = 0
    withheld: int = 0
    chains: int = 0

    @property
    def intact(self) -> bool:
        return not self.findings

    def add(
        self, kind: str, message: str, chain: str | None = None, seq: int | None = None
    ) -> None:
        self.findings.append(Finding(kind, message, chain, seq))

    def as_json(self) -> dict[str, Any]:
        return {
            "intact": self.intact,
            "records": self.records,
            "withheld": self.withheld,
            "chains": self.chains,
            "checks": self.checks,
            "findings": [f.as_json() for f in self.findings],
        }
