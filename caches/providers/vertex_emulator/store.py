"""The emulator's thread-safe in-memory cache table, with optional JSON-file persistence.

The HTTP handlers run on uvicorn's event-loop thread while tests read and mutate the same
store from their own thread through the Python API, so every access takes one lock. With a
state file, each mutation rewrites the whole file atomically (temp file + ``os.replace``): the
store holds demo-sized data, and a torn file after a crash would be worse than the cost.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .wire_time import format_timestamp, parse_timestamp

STATE_FILE_VERSION = 1


@dataclass
class StoredCache:
    """One CachedContent as the emulator keeps it: every input the caller sent, plus the
    server-computed fields. Only :meth:`to_resource` decides what goes back on the wire."""

    name: str
    project: str
    location: str
    cache_id: str
    model: str
    create_time: datetime
    update_time: datetime
    expire_time: datetime
    total_token_count: int
    text_count: int = 0
    display_name: str | None = None
    contents: list[Any] = field(default_factory=list)
    system_instruction: dict[str, Any] | None = None
    tools: list[Any] = field(default_factory=list)
    tool_config: dict[str, Any] | None = None
    kms_key_name: str | None = None

    def is_live(self, now: datetime) -> bool:
        """Whether the cache still exists at ``now`` (an expired cache behaves as deleted)."""
        return now < self.expire_time

    def to_resource(self) -> dict[str, Any]:
        """The output fields of spec §1.2; never contents, systemInstruction, tools or ttl.

        Zero counts are omitted, as proto3 JSON omits default values.
        """
        usage = {"totalTokenCount": self.total_token_count, "textCount": self.text_count}
        resource: dict[str, Any] = {"name": self.name}
        if self.display_name:
            resource["displayName"] = self.display_name
        resource.update(
            {
                "model": self.model,
                "createTime": format_timestamp(self.create_time),
                "updateTime": format_timestamp(self.update_time),
                "expireTime": format_timestamp(self.expire_time),
                "usageMetadata": {key: value for key, value in usage.items() if value},
            }
        )
        return resource

    def to_state(self) -> dict[str, Any]:
        """Everything, JSON-ready, for the state file and ``/_emulator/state``."""
        state = dataclasses.asdict(self)
        for key in ("create_time", "update_time", "expire_time"):
            state[key] = format_timestamp(getattr(self, key))
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> StoredCache:
        """Rebuild a record written by :meth:`to_state`."""
        values = dict(state)
        for key in ("create_time", "update_time", "expire_time"):
            values[key] = parse_timestamp(values[key], field=key)
        return cls(**values)


class CacheStore:
    """Name-keyed records behind one lock; expired records are dropped when noticed."""

    def __init__(self, *, state_file: str | os.PathLike[str] | None = None) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, StoredCache] = {}
        self._state_file = Path(state_file) if state_file is not None else None
        if self._state_file is not None and self._state_file.exists():
            self._load(self._state_file)

    @property
    def lock(self) -> threading.RLock:
        """The store lock, for read-modify-write sequences that span several calls."""
        return self._lock

    def contains(self, name: str) -> bool:
        """Whether a record with this name exists, live or not (used to avoid id reuse)."""
        with self._lock:
            return name in self._items

    def add(self, record: StoredCache) -> None:
        """Insert a new record and persist."""
        with self._lock:
            self._items[record.name] = record
            self._save()

    def get_live(self, name: str, now: datetime) -> StoredCache | None:
        """The record if it exists and has not expired; an expired one is purged."""
        with self._lock:
            record = self._items.get(name)
            if record is None:
                return None
            if not record.is_live(now):
                del self._items[name]
                self._save()
                return None
            return record

    def update(self, name: str, mutate: Callable[[StoredCache], None]) -> StoredCache | None:
        """Apply ``mutate`` to the record under the lock and persist; ``None`` if missing."""
        with self._lock:
            record = self._items.get(name)
            if record is None:
                return None
            mutate(record)
            self._save()
            return record

    def delete(self, name: str) -> bool:
        """Remove a record; ``False`` if it was not there."""
        with self._lock:
            if self._items.pop(name, None) is None:
                return False
            self._save()
            return True

    def live_in_parent(self, *, project: str, location: str, now: datetime) -> list[StoredCache]:
        """Live records of one project/location, oldest first (ties broken by name)."""
        with self._lock:
            records = [
                record
                for record in self._items.values()
                if record.project == project and record.location == location and record.is_live(now)
            ]
        return sorted(records, key=lambda record: (record.create_time, record.name))

    def all_records(self) -> list[StoredCache]:
        """Every record, live or expired, oldest first (for inspection only)."""
        with self._lock:
            records = list(self._items.values())
        return sorted(records, key=lambda record: (record.create_time, record.name))

    def clear(self) -> None:
        """Forget everything (and empty the state file)."""
        with self._lock:
            self._items.clear()
            self._save()

    def _load(self, path: Path) -> None:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != STATE_FILE_VERSION:
            raise ValueError(f"{path}: unsupported emulator state version {data.get('version')!r}")
        for state in data.get("caches", []):
            record = StoredCache.from_state(state)
            self._items[record.name] = record

    def _save(self) -> None:
        if self._state_file is None:
            return
        payload = {
            "version": STATE_FILE_VERSION,
            "caches": [record.to_state() for record in self._items.values()],
        }
        directory = self._state_file.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp_path = tempfile.mkstemp(prefix=".vertex-emulator-", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
            os.replace(temp_path, self._state_file)
        except BaseException:
            Path(temp_path).unlink(missing_ok=True)
            raise
