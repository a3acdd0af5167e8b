"""One strict JSON reader for every entry point (REST, gateway, console forms).

Python's ``json`` accepts things no client of ours means and some that crash later:
``NaN``/``Infinity`` (not JSON at all), nesting deep enough to raise ``RecursionError``,
NUL characters (PostgreSQL text columns refuse them: a 500 at save time), lone UTF-16
surrogates (they cannot be encoded back to UTF-8: a 500 at render time) and duplicate keys
in an object (``json`` keeps the last one silently, so what a proxy, a WAF or a log reads
can differ from what we act on). This module
refuses all of them up front with one error type carrying a stable code, so each adapter
maps it to its own error shape (``invalid_json`` over REST and the gateway).
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Deeper documents are refused; no request body of ours nests beyond a dozen levels.
DEFAULT_MAX_DEPTH = 64

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


class StrictJsonError(ValueError):
    """The bytes are not JSON we accept; ``code`` is stable, ``message`` human."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _refuse_constant(name: str) -> Any:
    raise StrictJsonError("invalid_json", f"{name} is not valid JSON.")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise StrictJsonError("invalid_json", f"The number {text[:40]} is out of range.")
    return value


def _check_text(value: str, where: str) -> None:
    match = _BAD_CHARS.search(value)
    if match is None:
        return
    what = "a NUL character" if match.group() == "\x00" else "an unpaired surrogate"
    raise StrictJsonError("invalid_json", f"{where} contains {what}.")


def check_value(value: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Walk a decoded value without recursion: depth bound, no NUL, no lone surrogates.

    Also used for query-string values, which never went through ``loads_strict``.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node, "A string")
        elif isinstance(node, dict | list):
            if depth > max_depth:
                raise StrictJsonError(
                    "invalid_json", f"The document nests deeper than {max_depth} levels."
                )
            if isinstance(node, dict):
                for key, child in node.items():
                    _check_text(key, "An object key")
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in node)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise StrictJsonError("invalid_json", f"Duplicate key {key!r} in a JSON object.")
        found[key] = value
    return found


def loads_strict(raw: bytes | str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Decode ``raw`` as strict JSON or raise :class:`StrictJsonError` (never anything else)."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise StrictJsonError("invalid_json", "The body is not UTF-8.") from None
    try:
        value = json.loads(
            raw,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except StrictJsonError:
        raise
    except RecursionError:
        raise StrictJsonError(
            "invalid_json", f"The document nests deeper than {max_depth} levels."
        ) from None
    except ValueError as exc:
        raise StrictJsonError("invalid_json", f"The body is not valid JSON: {exc}.") from None
    check_value(value, max_depth=max_depth)
    return value
