"""Lua scripts: one ``.lua`` file each in ``lua/``, loaded once, run by SHA.

Composition has one mechanism, the include directive: a line that is exactly
``-- #include <name>.lua`` is replaced by that file's resolved text (recursively; a cycle
is an error). That is how the gateway's admission script runs billing's budget reserve
script as a Lua function without its text living anywhere but ``budget_reserve.lua``.
No other text substitution happens.

A :class:`Script` runs with ``EVALSHA`` and falls back to ``EVAL`` when Redis does not
know it (a restart, a new server), on sync and asyncio clients alike, so no client keeps
its own registry of loaded scripts. The typed wrappers (arguments by name, replies as
dataclasses) live beside the families they serve: ``budget``, ``gateway``, ``fleet``,
``throttle``, ``queues``.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

LUA_DIR = Path(__file__).with_name("lua")
_INCLUDE = re.compile(r"^-- #include ([a-z0-9_]+\.lua)$", re.MULTILINE)

KeyArgs = Sequence[str]
Args = Sequence[str | int | float]


class ScriptIncludeError(ValueError):
    """A ``-- #include`` names a missing file or includes itself."""


def _resolve(name: str, stack: tuple[str, ...]) -> str:
    if name in stack:
        raise ScriptIncludeError(f"include cycle: {' -> '.join((*stack, name))}")
    path = LUA_DIR / name
    if not path.is_file():
        raise ScriptIncludeError(f"no such script: {name}")
    text = path.read_text()
    return _INCLUDE.sub(lambda m: _resolve(m.group(1), (*stack, name)).rstrip("\n"), text)


@dataclass(frozen=True)
class Script:
    """One resolved script and its SHA-1."""

    name: str
    source: str
    sha: str

    def run(self, client: Any, *, keys: KeyArgs, args: Args) -> Any:
        """Run on a sync client (``EVALSHA``; ``EVAL`` once when Redis lacks it)."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)

    async def run_async(self, client: Any, *, keys: KeyArgs, args: Args) -> Any:
        """Run on a ``redis.asyncio`` client (as :meth:`run`)."""
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(self.source, len(keys), *keys, *args)

    def queue(self, pipe: Any, *, keys: KeyArgs, args: Args) -> None:
        """``EVALSHA`` on a caller's pipeline. Its reply slot holds a ``NoScriptError``
        when Redis lost the script: the caller runs the call again with :meth:`run`."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)

    def queue_source(self, pipe: Any, *, keys: KeyArgs, args: Args) -> None:
        """``EVAL`` with the full text on a caller's pipeline (never NOSCRIPT; for
        pipelines that cannot re-run a part on its own)."""
        pipe.eval(self.source, len(keys), *keys, *args)


@functools.cache
def script(name: str) -> Script:
    """The script ``lua/<name>.lua``, its includes resolved (read once per process)."""
    source = _resolve(f"{name}.lua", ())
    return Script(name=name, source=source, sha=hashlib.sha1(source.encode()).hexdigest())


def script_names() -> list[str]:
    """Every script of the package (tests load them all)."""
    return sorted(p.stem for p in LUA_DIR.glob("*.lua"))
