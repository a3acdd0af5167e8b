"""Coalesced live usage: per-tenant counters pushed at most once a second.

The gateway calls ``usage_ticker.add`` for every request (in memory, under a lock); a
daemon thread publishes each tenant's deltas to ``t.<tenant>.usage`` and the fleet's to
``p.usage`` once a second — snapshots, not a firehose — so a page's cost does not grow
with traffic. Delivery is best effort: pages re-fetch totals over REST on (re)connect.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, fields

from controlplane.live import platform_group, publish_now, tenant_group

TICK_SECONDS = 1.0


@dataclass
class UsageDelta:
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    available_tokens: int = 0
    routed_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    errors: int = 0

    def add(self, other: UsageDelta) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class UsageTicker:
    def __init__(self, *, autostart: bool = True) -> None:
        self.autostart = autostart
        self._lock = threading.Lock()
        self._pending: dict[str, UsageDelta] = {}
        self._thread: threading.Thread | None = None

    def add(self, tenant_id: str, delta: UsageDelta) -> None:
        with self._lock:
            self._pending.setdefault(tenant_id, UsageDelta()).add(delta)
            if self.autostart and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="usage-ticker", daemon=True)
                self._thread.start()

    def flush(self) -> int:
        """Publish and clear pending deltas; returns how many tenants were published."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return 0
        fleet = UsageDelta()
        at = time.time()
        for tenant_id, delta in pending.items():
            fleet.add(delta)
            publish_now(
                tenant_group(tenant_id, "usage"), "usage.tick", {**delta.as_dict(), "at": at}
            )
        publish_now(
            platform_group("usage"),
            "usage.tick",
            {**fleet.as_dict(), "at": at, "tenants": len(pending)},
        )
        return len(pending)

    def _run(self) -> None:
        while True:
            time.sleep(TICK_SECONDS)  # the coalescing interval, not simulated work
            self.flush()


usage_ticker = UsageTicker()
