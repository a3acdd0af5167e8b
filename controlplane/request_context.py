"""The request id of the work in progress, shared by logs, audit rows and task headers.

A ``ContextVar`` follows both threads and asyncio tasks, so sync views, async consumers
and Celery tasks each see their own id without passing it through every call.
"""

from __future__ import annotations

import re
import secrets
from contextvars import ContextVar, Token

_request_id: ContextVar[str | None] = ContextVar("cacheplane_request_id", default=None)

# Accept client-supplied ids only when they are short and harmless in logs.
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")


def new_request_id() -> str:
    """Return a fresh random request id (128 random bits, hex)."""
    return secrets.token_hex(16)


def sanitize_request_id(candidate: str | None) -> str:
    """Keep a well-formed incoming id (for cross-service tracing), else mint one.

    For tracing only: a caller chooses (and may reuse) this id, so it must never be an
    idempotency or ledger key. The gateway books each request under a key it mints
    itself (``billing.services.budget_reservations.hold_new_id``) and keeps this id in
    the ledger's ``client_request_id`` column.
    """
    if candidate and _VALID_ID.match(candidate):
        return candidate
    return new_request_id()


def get_request_id() -> str | None:
    """The current request id, or None outside a request or task."""
    return _request_id.get()


def set_request_id(value: str | None) -> Token[str | None]:
    """Bind ``value`` as the current request id; pass the token to ``reset_request_id``."""
    return _request_id.set(value)


def reset_request_id(token: Token[str | None]) -> None:
    """Restore the request id that was current before ``set_request_id``."""
    _request_id.reset(token)
