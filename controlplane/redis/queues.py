"""Lists flushed in claimed batches (the usage queue, the budget settle queue).

``list_claim.lua`` moves up to ``limit`` items into a new batch list and registers the
batch with its claim time, so a flusher that dies loses nothing: a batch whose claim is
older than a lease is claimed again.
"""

from __future__ import annotations

from typing import Any

from controlplane.redis.scripts import script


def list_claim(
    client: Any, *, queue: str, batch: str, claims: str, limit: int, claimed_at: float
) -> int:
    """Move up to ``limit`` items of ``queue`` into ``batch`` (registered in ``claims``
    at ``claimed_at``); returns how many moved (0: nothing queued, no batch made)."""
    return int(
        script("list_claim").run(client, keys=[queue, batch, claims], args=[limit, claimed_at])
    )
