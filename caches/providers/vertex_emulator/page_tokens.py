"""Opaque ``pageToken`` values for ListCachedContents (spec §1.5).

A token holds the parent it was issued for and the sort key of the last item served, so a
cache created or deleted between two pages neither repeats nor skips another one (keyset
pagination), and a token replayed against another parent is refused.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC

from .rpc_errors import invalid_argument
from .store import StoredCache


def sort_key(record: StoredCache) -> tuple[str, str]:
    """The list order key: (create time, name), comparable as plain strings."""
    # Fixed-width UTC text, so that string order is time order (unlike the wire format).
    return (f"{record.create_time.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%f}", record.name)


def encode_page_token(parent: str, after: tuple[str, str]) -> str:
    """A token resuming ``parent``'s list after the item with sort key ``after``."""
    raw = json.dumps({"parent": parent, "after": list(after)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_page_token(token: str, parent: str) -> tuple[str, str]:
    """The sort key a token resumes after; 400 if it is malformed or from another parent."""
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        after = data["after"]
        token_parent = data["parent"]
        if not (isinstance(after, list) and len(after) == 2):
            raise ValueError
        result = (str(after[0]), str(after[1]))
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeError):
        raise invalid_argument("Invalid page_token.") from None
    if token_parent != parent:
        raise invalid_argument("page_token does not belong to this parent.")
    return result
