"""Typed access to the environment that fails fast with one readable line.

Settings are read from the environment only (production differs from development by
environment alone). Every getter raises :class:`ConfigError` naming the variable, so the
CLI can stop start-up with ``CONFIG ERROR: <VAR>: <why>`` instead of a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar, overload

import dj_database_url

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(Exception):
    """A configuration variable is missing or malformed."""

    def __init__(self, variable: str, reason: str) -> None:
        super().__init__(f"{variable}: {reason}")
        self.variable = variable
        self.reason = reason


@overload
def env_str(name: str, default: str, *, required: bool = False) -> str: ...
@overload
def env_str(name: str, default: None = None, *, required: bool = False) -> str | None: ...


def env_str(name: str, default: str | None = None, *, required: bool = False) -> str | None:
    """Return the variable's value, ``default`` when unset, or raise when required."""
    value = os.environ.get(name)
    if value is None or value == "":
        if required:
            raise ConfigError(name, "is required but not set")
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    """Parse 1/0, true/false, yes/no, on/off (case-insensitive)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(name, f"expected a boolean (true/false), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """Parse an integer, optionally bounded below."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    """Parse a decimal number, optionally bounded below."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(name, f"expected a number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """Parse a comma-separated list, dropping empty items."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Parse one of a fixed set of values."""
    value = env_str(name, default) or default
    if value not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def parse_with(name: str, raw: str, parser: Callable[[str], T]) -> T:
    """Run ``parser`` and turn any failure into a ConfigError naming ``name``."""
    try:
        return parser(raw)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(name, f"malformed value ({exc})") from None


def parse_database_url(name: str, raw: str) -> dict[str, Any]:
    """Parse a PostgreSQL URL into a Django DATABASES entry; only PostgreSQL is accepted."""

    def _parse(value: str) -> dict[str, Any]:
        if "://" not in value:
            raise ValueError("expected postgresql://user:password@host:port/dbname")
        config = dj_database_url.parse(value, conn_max_age=60, conn_health_checks=True)
        engine = config.get("ENGINE", "")
        if engine != "django.db.backends.postgresql":
            raise ValueError("only PostgreSQL (postgresql://...) is supported")
        if not config.get("NAME"):
            raise ValueError("the URL names no database")
        return dict(config)

    return parse_with(name, raw, _parse)


def parse_redis_url(name: str, raw: str) -> str:
    """Validate a redis:// or rediss:// URL (unix sockets: unix://)."""
    if not raw.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(name, "expected redis://host:port/db (or rediss://, unix://)")
    return raw


#: Substrings that mark a value as an example from documentation or a manifest, never a
#: real secret (the shipped placeholders all carry one of them).
PLACEHOLDER_MARKERS = (
    "replace-me",
    "replace_me",
    "replaceme",
    "change-me",
    "change_me",
    "changeme",
    "placeholder",
    "insecure",
    "example-secret",
)
#: Whole values that documentation uses as passwords (.env.example's database URL).
PLACEHOLDER_VALUES = frozenset({"secret", "password", "passw0rd", "admin", "test", "example"})


def refuse_placeholder(name: str, value: str | None, *, url: bool = False) -> None:
    """Raise when ``value`` is a known placeholder (for a URL: its password).

    Production calls this for every secret: a manifest or ``.env`` file applied without
    its placeholders replaced would otherwise run with a publicly known key.
    """
    if url and value:
        from urllib.parse import urlsplit

        try:
            value = urlsplit(value).password
        except ValueError:
            return  # the URL's own parser reports the malformed value
    if not value:
        return
    lowered = value.lower()
    if lowered in PLACEHOLDER_VALUES or any(marker in lowered for marker in PLACEHOLDER_MARKERS):
        raise ConfigError(
            name,
            "is a known placeholder value; production needs a real secret from your secret store",
        )
