"""Cache-aware prompt assembly: one canonical form for a cached context.

Equal content must give an equal digest (the ETag) and an equal token prefix, whatever
order the client listed things in: tools are sorted by name, documents by (id, chunk).
The system instruction comes first, then tools, then documents — the stable-to-volatile
order that keeps hit rates high. ``content_lint`` flags volatile values (timestamps,
UUIDs, session ids) inside the cached prefix, which would silently destroy the hit rate.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

GCS_URI = re.compile(r"^gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])/(.+)$")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Document:
    """One chunk of a document: inline text or a ``gs://`` URI (Vertex only)."""

    id: str
    chunk: int = 0
    text: str | None = None
    uri: str | None = None
    mime_type: str = "text/plain"
    etag: str | None = None


@dataclass(frozen=True)
class CacheContent:
    system_instruction: str = ""
    tools: tuple[Tool, ...] = ()
    documents: tuple[Document, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CacheContent:
        """Build from the API's JSON shape (already validated by the serializer)."""
        return cls(
            system_instruction=data.get("system_instruction") or "",
            tools=tuple(
                Tool(t["name"], t.get("description", ""), t.get("parameters") or {})
                for t in data.get("tools") or []
            ),
            documents=tuple(
                Document(
                    id=str(d["id"]),
                    chunk=int(d.get("chunk", 0)),
                    text=d.get("text"),
                    uri=d.get("uri"),
                    mime_type=d.get("mime_type") or "text/plain",
                    etag=d.get("etag"),
                )
                for d in data.get("documents") or []
            ),
        )

    def canonical(self) -> CacheContent:
        """The same content in canonical order."""
        return CacheContent(
            system_instruction=self.system_instruction,
            tools=tuple(sorted(self.tools, key=lambda t: t.name)),
            documents=tuple(sorted(self.documents, key=lambda d: (d.id, d.chunk))),
        )

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON-ready form (what is stored and hashed)."""
        c = self.canonical()
        return {
            "system_instruction": c.system_instruction,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in c.tools
            ],
            "documents": [
                {
                    k: v
                    for k, v in {
                        "id": d.id,
                        "chunk": d.chunk,
                        "text": d.text,
                        "uri": d.uri,
                        "mime_type": d.mime_type,
                        "etag": d.etag,
                    }.items()
                    if v is not None
                }
                for d in c.documents
            ],
        }

    def digest(self) -> str:
        """SHA-256 over the canonical JSON: the cache's ETag."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def gcs_uris(self) -> list[str]:
        return [d.uri for d in self.documents if d.uri]

    def inline_bytes(self) -> int:
        """Bytes of inline content (Vertex limits inline content to 10 MB)."""
        return len(json.dumps(self.to_dict(), ensure_ascii=False).encode("utf-8"))

    def render_prefix(self) -> str:
        """The prompt prefix a vLLM worker caches: deterministic text, stable first.

        The gateway prepends exactly this text for requests naming the cache, so the
        tokens (and therefore the block hashes) are identical.
        """
        c = self.canonical()
        sections = []
        if c.system_instruction:
            sections.append(f"<system>\n{c.system_instruction}\n</system>")
        if c.tools:
            tools = [
                json.dumps(
                    {"name": t.name, "description": t.description, "parameters": t.parameters},
                    sort_keys=True,
                    separators=(",", ":"),
                )
                for t in c.tools
            ]
            sections.append("<tools>\n" + "\n".join(tools) + "\n</tools>")
        for d in c.documents:
            sections.append(
                f'<document id="{d.id}" chunk="{d.chunk}">\n{d.text or ""}\n</document>'
            )
        return "\n".join(sections) + "\n"


# --- Lint ------------------------------------------------------------------------------

_VOLATILE_PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "timestamp",
        re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?\b"),
        "A timestamp changes between requests and invalidates every token after it.",
    ),
    (
        "date",
        re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b(today is|current date|as of)\b", re.IGNORECASE),
        "A current date in the prefix changes daily; move it to the volatile tail.",
    ),
    (
        "uuid",
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "A UUID (request or session id) makes the prefix unique per request.",
    ),
    (
        "session_id",
        re.compile(r"\b(session|request|trace|conversation)[ _-]?id\s*[:=]\s*\S+", re.IGNORECASE),
        "A session or request id makes the prefix unique per conversation.",
    ),
    (
        "epoch",
        re.compile(r"\b1[6-9]\d{8}(\d{3})?\b"),
        "A Unix timestamp changes every second.",
    ),
)


@dataclass(frozen=True)
class LintFinding:
    kind: str
    location: str
    snippet: str
    advice: str


def content_lint(content: CacheContent) -> list[LintFinding]:
    """Volatile values inside the cached prefix, with where they are and why they hurt."""
    findings: list[LintFinding] = []
    c = content.canonical()
    places: list[tuple[str, str]] = [("system_instruction", c.system_instruction)]
    places += [(f"tools[{t.name}]", f"{t.description} {json.dumps(t.parameters)}") for t in c.tools]
    places += [(f"documents[{d.id}#{d.chunk}]", d.text or "") for d in c.documents]
    for location, text in places:
        seen_spans: list[tuple[int, int]] = []
        for kind, pattern, advice in _VOLATILE_PATTERNS:
            for match in pattern.finditer(text):
                span = match.span()
                if any(s <= span[0] < e for s, e in seen_spans):
                    continue  # a timestamp also matches "date"; report it once
                seen_spans.append(span)
                start = max(0, span[0] - 20)
                findings.append(
                    LintFinding(kind, location, text[start : span[1] + 20].strip(), advice)
                )
    return findings


def gcs_bucket(uri: str) -> str | None:
    match = GCS_URI.match(uri)
    return match.group(1) if match else None
