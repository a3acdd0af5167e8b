"""Typed wrappers of the failure and refusal counters (API-key guessing, logins)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.redis.scripts import script


@dataclass(frozen=True)
class FailureCount:
    """One failure counted: the count so far, and whether it engaged the lock."""

    failures: int
    engaged: bool


def throttle_failure(
    client: Any, *, counter: str, lock: str, window_seconds: int, limit: int, lock_seconds: int
) -> FailureCount:
    """Count one failure in ``counter`` (a ``window_seconds`` window); at ``limit``, set
    ``lock`` for ``lock_seconds`` and reset the count."""
    count, engaged = script("throttle_failure").run(
        client, keys=[counter, lock], args=[window_seconds, limit, lock_seconds]
    )
    return FailureCount(failures=int(count), engaged=bool(int(engaged)))


def throttle_refusal(
    client: Any, *, counter: str, gate: str, gate_seconds: int, counter_ttl_seconds: int
) -> int:
    """Count one refusal; the count to audit when the gate was open (it closes for
    ``gate_seconds``), else 0."""
    return int(
        script("throttle_refusal").run(
            client, keys=[counter, gate], args=[gate_seconds, counter_ttl_seconds]
        )
    )
