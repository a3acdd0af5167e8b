"""The one owner of Redis: key layouts, Lua scripts, clients (docs/redis.md).

- ``keys``: every key layout, one builder per family, and ``FAMILIES`` (the list the
  Redis test checks every key against);
- ``scripts``: the loader of ``lua/*.lua`` (one file per script, ``-- #include`` the one
  composition mechanism) and :class:`~controlplane.redis.scripts.Script`;
- typed wrappers per family (arguments by name, replies as dataclasses): ``budget``
  (billing's budget holds), ``gateway`` (admission and closing), ``fleet`` (routing and
  the KV index), ``throttle`` (failure counters), ``queues`` (claimed batches);
- ``clients`` (sync and per-event-loop asyncio clients) and ``batch`` (group commit).

The logic a script encodes belongs to its domain app (budget holds are billing's); this
package keeps the text, the keys and the calling convention, so every Redis access is in
one place that mypy, the import rules and the key test see.
"""
