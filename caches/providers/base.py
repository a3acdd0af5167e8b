"""The small interface every cache provider implements, and its error taxonomy.

Tasks retry ``TransientProviderError`` (429, 5xx, connection failures) with backoff;
``PermanentProviderError`` fails the operation with its code and message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from caches.models import CacheObject


class ProviderError(Exception):
    code = "provider_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class TransientProviderError(ProviderError):
    """Worth retrying: rate limits, server errors, timeouts, refused connections."""

    code = "provider_unavailable"


class PermanentProviderError(ProviderError):
    """Retrying cannot help: invalid content, permission denied, unknown model."""


class RemoteGone(PermanentProviderError):
    """The remote cache no longer exists (expired or deleted behind our back)."""

    code = "remote_gone"


@dataclass(frozen=True)
class Prefill:
    """One request a provider sent a worker to warm or probe a prefix: what it cost the
    worker (metered as the cache's creation cost) and how much of the prefix was resident."""

    worker: str
    pool: str
    request_id: str
    prompt_tokens: int
    cached_tokens: int | None  # None: the worker does not report prompt token details
    output_tokens: int
    #: The cached tokens a wholly resident prefix would report: its full blocks, less the
    #: last token the engine always recomputes (``(prompt_tokens - 1) // block * block``).
    resident_full: int


@dataclass
class RemoteState:
    """What a provider reports after an operation.

    ``prefills`` (vLLM): the warm-up or probe requests sent, one per worker; ``pool``: the
    worker pool of the placement's first worker (the price of the cache's storage).
    """

    remote_name: str = ""
    token_count: int | None = None
    expire_at: datetime | None = None
    placement: list[str] = field(default_factory=list)
    cached_tokens: int | None = None
    pool: str = ""
    prefills: list[Prefill] = field(default_factory=list)

    @property
    def evicted(self) -> bool:
        """A probe found less than the whole prefix resident on some worker."""
        return any(
            p.cached_tokens is not None and p.cached_tokens < p.resident_full for p in self.prefills
        )


@dataclass
class RemoteListing:
    """One remote cache carrying our display-name prefix (for reconciliation)."""

    remote_name: str
    display_name: str
    expire_at: datetime | None


class CacheProviderClient(Protocol):
    def create(self, cache: CacheObject, *, retry: bool = False) -> RemoteState:
        """Make the cache; ``retry``: an earlier attempt may already have made it."""
        ...

    def refresh(self, cache: CacheObject, *, ttl_seconds: int) -> RemoteState: ...

    def evict(self, cache: CacheObject) -> None: ...
