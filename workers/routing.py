"""Where a prefix lives: rendezvous (highest-random-weight) hashing over healthy workers.

The cache warmer and the gateway use the same ordering for a (tenant, prefix) key, so
requests naming a cache land on the workers that were warmed for it, and a worker joining
or leaving moves only the keys it wins or held.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import TypeVar

T = TypeVar("T")


def rendezvous_order(
    key: str, workers: Iterable[T], *, name: Callable[[T], object] = attrgetter("name")
) -> list[T]:
    """Workers ordered by their hash weight for ``key`` (first = preferred)."""

    def weight(worker: T) -> int:
        digest = hashlib.blake2b(f"{key}|{name(worker)}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    return sorted(workers, key=weight, reverse=True)


def placement_for(
    key: str,
    workers: Sequence[T],
    replicas: int,
    *,
    name: Callable[[T], object] = attrgetter("name"),
) -> list[T]:
    """The ``replicas`` preferred workers for ``key``."""
    return rendezvous_order(key, workers, name=name)[: max(1, replicas)]
