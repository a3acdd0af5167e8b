"""What callers sent to the emulator, so tests can assert on the wire and count remote calls.

Authorization headers are never recorded (the log may be printed in a failing test); a short
fingerprint of the bearer token is kept instead so that per-tenant credentials can still be
told apart.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .wire_time import format_timestamp

DEFAULT_MAX_ENTRIES = 10_000


def token_fingerprint(token: str) -> str:
    """First 12 hex digits of the token's SHA-256: stable, and useless to an attacker."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class RecordedRequest:
    """One request on a Google path, with the status the emulator answered."""

    method: str
    path: str
    query: Mapping[str, str]
    body: Any
    headers: Mapping[str, str]
    token_fingerprint: str | None
    status: int
    received_at: datetime

    def to_state(self) -> dict[str, Any]:
        """JSON-ready form, for ``GET /_emulator/requests``."""
        return {
            "method": self.method,
            "path": self.path,
            "query": dict(self.query),
            "body": self.body,
            "headers": dict(self.headers),
            "token_fingerprint": self.token_fingerprint,
            "status": self.status,
            "received_at": format_timestamp(self.received_at),
        }


class RequestLog:
    """A bounded, thread-safe list of :class:`RecordedRequest` (oldest dropped first)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._entries: deque[RecordedRequest] = deque(maxlen=max_entries)

    def record(self, entry: RecordedRequest) -> None:
        """Append one entry."""
        with self._lock:
            self._entries.append(entry)

    def entries(
        self, *, method: str | None = None, path_contains: str | None = None
    ) -> list[RecordedRequest]:
        """A snapshot, optionally filtered by method and by a substring of the path."""
        with self._lock:
            entries = list(self._entries)
        return [
            entry
            for entry in entries
            if (method is None or entry.method == method.upper())
            and (path_contains is None or path_contains in entry.path)
        ]

    def clear(self) -> None:
        """Forget everything recorded so far."""
        with self._lock:
            self._entries.clear()


def loggable_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Lower-cased headers without ``authorization`` (or any cookie)."""
    hidden = {"authorization", "cookie", "proxy-authorization"}
    return {key.lower(): value for key, value in headers.items() if key.lower() not in hidden}
