"""Before/after for the audit log: one snapshot helper and one diff, for every mutation.

A service takes ``before = model_snapshot(obj)`` while it holds the row, changes it, and
passes ``changes=diff(before, model_snapshot(obj))`` to ``audit_record`` (``EMPTY`` stands
for "did not exist": creates diff from it, deletes to it). ``audit_record`` accepts no
other shape, so no call site can hand-build a diff that forgets a field or leaks one.

What a snapshot holds is declared per model in ``audit.registry``: recorded fields as
JSON-safe values with secrets inside them scrubbed (``audit.redaction``), sensitive fields
only as ``"[redacted]"``. Change detection uses a keyed fingerprint of the raw value kept
in memory only, so a rotated secret or a new token inside a webhook URL still shows up as
a change while neither value is ever written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import secrets
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import models

from audit.redaction import REDACTED, scrub
from audit.registry import audit_fields_for

logger = logging.getLogger(__name__)

# Fingerprints never leave the process; the key makes them useless even if one is logged.
_FINGERPRINT_KEY = secrets.token_bytes(32)


@dataclass(frozen=True)
class Snapshot:
    """One side of a change: ``values`` is what an audit row may hold (already redacted)."""

    values: Mapping[str, Any]
    fingerprints: Mapping[str, str] = field(default_factory=dict, repr=False)


EMPTY = Snapshot(values={})


class Changes(dict[str, dict[str, Any]]):
    """``{field: {"before": old, "after": new}}`` for changed fields, built by ``diff``."""


def jsonable(value: Any) -> Any:
    """A JSON-safe copy: decimals as stored (``"1.000000"``), times in ISO 8601, ids as str."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return str(value)  # a TextChoices member becomes its plain value
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(jsonable(item) for item in value)
    return str(value)


def _fingerprint(raw: Any) -> str:
    payload = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.blake2b(payload, key=_FINGERPRINT_KEY, digest_size=16).hexdigest()


def _hidden(raw: Any) -> Any:
    # Whether a secret is set at all is not secret; its value is.
    return raw if raw in (None, "", [], {}) else REDACTED


def values_snapshot(values: Mapping[str, Any], *, sensitive: Iterable[str] = ()) -> Snapshot:
    """A snapshot of values that are not one model row (a policy's bindings, a version).

    ``sensitive`` names the keys whose values are credentials (shown as ``"[redacted]"``).
    """
    hidden = set(sensitive)
    shown: dict[str, Any] = {}
    prints: dict[str, str] = {}
    for name, value in values.items():
        raw = jsonable(value)
        prints[name] = _fingerprint(raw)
        shown[name] = _hidden(raw) if name in hidden else scrub(raw)
    return Snapshot(values=shown, fingerprints=prints)


def model_snapshot(obj: models.Model, *, fields: Iterable[str] | None = None) -> Snapshot:
    """The audited fields of ``obj`` as its declaration in ``audit.registry`` allows.

    ``fields`` narrows the snapshot to the fields a service wrote (only those are read, so
    a row loaded with ``only(...)`` costs no query). Foreign keys appear under their field
    name with the related primary key. Raises LookupError for an undeclared model.
    """
    model = type(obj)
    declared = audit_fields_for(model)
    concrete = {f.name: f for f in model._meta.concrete_fields}
    names = list(concrete) if fields is None else list(dict.fromkeys(fields))
    unknown = [name for name in names if name not in concrete]
    if unknown:
        raise ValueError(f"{model.__name__} has no concrete field(s) {', '.join(unknown)}")
    shown: dict[str, Any] = {}
    prints: dict[str, str] = {}
    for name in names:
        if name in declared.ignored:
            continue
        raw = jsonable(concrete[name].value_from_object(obj))
        prints[name] = _fingerprint(raw)
        if name in declared.recorded:
            shown[name] = scrub(raw)
        else:
            if name not in declared.sensitive:
                # Fail closed: an unclassified field is hidden until audit/registry.py
                # says otherwise (tests/audit/test_registry.py catches the gap).
                logger.warning(
                    "audit: unclassified field hidden",
                    extra={"model": model._meta.label, "field": name},
                )
            shown[name] = _hidden(raw)
    return Snapshot(values=shown, fingerprints=prints)


def diff(before: Snapshot, after: Snapshot) -> Changes:
    """The fields whose value differs between two snapshots, with both sides as shown.

    A field missing from one side counts as ``None`` there (``EMPTY`` for a create).
    """
    absent = _fingerprint(None)
    changes = Changes()
    for name in sorted(set(before.values) | set(after.values)):
        if before.fingerprints.get(name, absent) != after.fingerprints.get(name, absent):
            changes[name] = {"before": before.values.get(name), "after": after.values.get(name)}
    return changes
