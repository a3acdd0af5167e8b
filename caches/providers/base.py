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


@dataclass
class RemoteState:
    """What a provider reports after an operation."""

    remote_name: str = ""
    token_count: int | None = None
    expire_at: datetime | None = None
    placement: list[str] = field(default_factory=list)
    cached_tokens: int | None = None


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
