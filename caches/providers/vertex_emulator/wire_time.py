"""Protobuf JSON ``Timestamp`` and ``Duration`` strings, parsed and written the way Vertex does.

Vertex parses request bodies with protobuf's JSON parser, so we follow its rules rather than
Python's: a timestamp must carry ``Z`` or an offset (the genai SDK sends a naive datetime with
no offset at all, spec §1.3, and we reject it instead of guessing a zone), fractions go up to
nanoseconds, and a duration is decimal seconds with an ``s`` suffix (``"3600s"``, ``"90.5s"``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from .rpc_errors import RpcError, invalid_argument

_TIMESTAMP_RE = re.compile(
    r"^(?P<base>\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<fraction>\d{1,9}))?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})?$"
)
_DURATION_RE = re.compile(r"^-?\d+(?:\.\d{1,9})?s$")


def _bad_value(field: str, type_name: str, value: object) -> RpcError:
    # Modelled on the Google front end's protobuf JSON parse error; not confirmed verbatim.
    return invalid_argument(
        f"Invalid value at '{field}' (type.googleapis.com/google.protobuf.{type_name}), \"{value}\""
    )


def parse_timestamp(value: object, *, field: str) -> datetime:
    """Parse an RFC 3339 timestamp with a zone into an aware UTC datetime.

    Raises :class:`RpcError` 400 for anything protobuf would refuse, including a naive value.
    """
    if not isinstance(value, str):
        raise _bad_value(field, "Timestamp", value)
    match = _TIMESTAMP_RE.match(value)
    if match is None or match.group("zone") is None:
        raise _bad_value(field, "Timestamp", value)
    # Python keeps microseconds only; the digits below them cannot change an expiry check.
    fraction = (match.group("fraction") or "")[:6].ljust(6, "0")
    zone = match.group("zone").upper().replace("Z", "+00:00")
    try:
        moment = datetime.fromisoformat(f"{match.group('base')}.{fraction}{zone}")
    except ValueError:
        raise _bad_value(field, "Timestamp", value) from None
    return moment.astimezone(UTC)


def format_timestamp(moment: datetime) -> str:
    """Write an aware datetime as protobuf does: UTC, ``Z``, 0/3/6 fractional digits."""
    if moment.tzinfo is None:
        raise ValueError("format_timestamp needs an aware datetime")
    utc = moment.astimezone(UTC)
    base = utc.strftime("%Y-%m-%dT%H:%M:%S")
    micros = utc.microsecond
    if micros == 0:
        return f"{base}Z"
    if micros % 1000 == 0:
        return f"{base}.{micros // 1000:03d}Z"
    return f"{base}.{micros:06d}Z"


def parse_duration(value: object, *, field: str) -> timedelta:
    """Parse a protobuf JSON duration (``"3600s"``) into a timedelta; 400 if malformed."""
    if not isinstance(value, str) or not _DURATION_RE.match(value):
        raise _bad_value(field, "Duration", value)
    try:
        seconds = Decimal(value[:-1])
        return timedelta(seconds=float(seconds))
    except (InvalidOperation, OverflowError):
        raise _bad_value(field, "Duration", value) from None
