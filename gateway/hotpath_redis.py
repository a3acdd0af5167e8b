"""The gateway's asyncio Redis client (one per event loop) and its batched Lua scripts.

The hot path talks to Redis without a thread hop, through redis-py's ``redis.asyncio``
client (with the ``hiredis`` reply parser): the admission and closing scripts (rate
limits, budget holds, their settlement) are one ``EVALSHA`` per batch of concurrent
requests (:class:`BatchedScript`), each request still its own atomic step.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar
from urllib.parse import urlparse

import hiredis
import redis.asyncio as aioredis
from django.conf import settings
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.typing import EncodableT


class HiredisPackedConnection(aioredis.Connection):
    """redis-py's asyncio connection, packing commands with hiredis (C) like its sync one.

    redis-py's asyncio ``pack_command`` is Python: with the scripts' dozens of arguments
    it was the gateway's largest single CPU cost (about a fifth of a request's CPU).
    """

    def pack_command(self, *args: EncodableT) -> list[bytes]:
        command = args[0]
        if isinstance(command, str) and " " in command:  # e.g. "CONFIG GET", as redis-py
            args = (*command.split(), *args[1:])
        # hiredis's stub types the argument as a one-element tuple; it takes any length.
        return [hiredis.pack_command(args)]  # type: ignore[arg-type]

    async def check_health(self) -> None:
        """PING a connection idle for ``HEALTH_CHECK_SECONDS`` before using it; if the
        PING fails (Redis restarted since: every pooled connection is dead), connect
        again instead of failing the request. Only the PING is repeated, never a script
        (a hold must not be taken twice)."""
        try:
            await super().check_health()  # type: ignore[no-untyped-call]
        except (RedisConnectionError, OSError):
            await self.disconnect()
            await self.connect()  # type: ignore[no-untyped-call]


Item = TypeVar("Item")
Reply = TypeVar("Reply")

_clients: dict[int, tuple[asyncio.AbstractEventLoop, aioredis.Redis]] = {}


def client() -> aioredis.Redis:
    """The running loop's client (a restarted loop, e.g. in tests, gets its own)."""
    loop = asyncio.get_running_loop()
    entry = _clients.get(id(loop))
    if entry is None or entry[0] is not loop:
        entry = (
            loop,
            aioredis.Redis(connection_pool=connection_pool(settings.REDIS_URL)),
        )
        if len(_clients) > 16:  # loops of finished test servers
            _clients.clear()
        _clients[id(loop)] = entry
    return entry[1]


#: A pooled connection idle this long is checked before use (see ``check_health``):
#: shorter than a Redis restart, longer than the gap between requests under load.
HEALTH_CHECK_SECONDS = 1.0


def connection_pool(url: str, *, timeout: float = 10.0) -> aioredis.BlockingConnectionPool:
    """A bounded, blocking pool with hiredis packing: a burst of requests waits for one
    of a few connections instead of opening hundreds at once (which is what times out).
    ``timeout`` bounds connecting, each reply and the wait for a pooled connection."""
    options: dict[str, Any] = {}
    if urlparse(url).scheme == "redis":  # TCP without TLS (rediss:// and unix:// keep theirs)
        options["connection_class"] = HiredisPackedConnection
    return aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=64,
        timeout=timeout,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        health_check_interval=HEALTH_CHECK_SECONDS,
        **options,
    )


_scripts: dict[tuple[int, str], AsyncScript] = {}


def script(source: str) -> AsyncScript:
    """A registered script of the running loop's client (EVALSHA, EVAL on a cache miss)."""
    redis = client()
    key = (id(redis), source)
    found = _scripts.get(key)
    if found is None:
        if len(_scripts) > 64:
            _scripts.clear()
        found = _scripts[key] = redis.register_script(source)
    return found


#: Runs one script body (``OP``, a Lua function of its own KEYS and ARGV, after the
#: functions of ``PRELUDE``) for a batch of callers. ARGV: count, then (keys, args)
#: sizes per call, then every call's args in order; KEYS: every call's keys in order.
#: Returns one reply per call.
_BATCH = """
__PRELUDE__
local function op(KEYS, ARGV)
__OP__
end
local count = tonumber(ARGV[1])
local out = {}
local k, a = 0, 1 + 2 * count
for i = 1, count do
  local nk, na = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local keys, args = {}, {}
  for j = 1, nk do keys[j] = KEYS[k + j] end
  for j = 1, na do args[j] = ARGV[a + j] end
  k, a = k + nk, a + na
  out[i] = op(keys, args)
end
return out
"""


class GroupCommit(Generic[Item, Reply]):
    """Group commit on one event loop: items submitted while a batch is being written go
    together in the next one, one ``write`` per batch of at most ``MAX_BATCH``.

    One item alone costs one ``write``, as without batching; under load the fixed cost of
    a write (a round trip, packing, the connection) is shared. ``write`` returns one reply
    per item, in order; each submitter gets its own reply, or ``write``'s exception. The
    writer is a task of its own, so a cancelled submitter never stops a batch others
    wait on (its item is written anyway).
    """

    MAX_BATCH = 64

    def __init__(self, write: Callable[[list[Item]], Awaitable[Sequence[Reply]]]) -> None:
        self._write_batch = write
        self._loops: dict[int, tuple[asyncio.AbstractEventLoop, _Batches[Item, Reply]]] = {}

    async def submit(self, item: Item) -> Reply:
        loop = asyncio.get_running_loop()
        entry = self._loops.get(id(loop))
        if entry is None or entry[0] is not loop:
            if len(self._loops) > 16:  # loops of finished test servers
                self._loops.clear()
            entry = self._loops[id(loop)] = (loop, _Batches())
        batches = entry[1]
        done: asyncio.Future[Reply] = loop.create_future()
        batches.pending.append((item, done))
        if batches.writer is None or batches.writer.done():
            batches.writer = loop.create_task(self._write(batches))
        return await done

    async def _write(self, batches: _Batches[Item, Reply]) -> None:
        while batches.pending:
            batch = batches.pending[: self.MAX_BATCH]
            del batches.pending[: self.MAX_BATCH]
            try:
                replies = await self._write_batch([item for item, _ in batch])
            except Exception as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for (_, done), reply in zip(batch, replies, strict=True):
                if not done.done():  # its submitter was cancelled: the item was written
                    done.set_result(reply)


class _Batches(Generic[Item, Reply]):
    def __init__(self) -> None:
        self.pending: list[tuple[Item, asyncio.Future[Reply]]] = []
        self.writer: asyncio.Task[None] | None = None


Call = tuple[list[str], list[str]]


class BatchedScript:
    """A Lua script run for every caller of one event loop in shared round trips.

    Group commit (:class:`GroupCommit`): calls that arrive while a batch is on its way to
    Redis go together in the next one (one ``EVALSHA`` for all of them, each call still
    its own atomic step in the order it arrived: the script runs them one after the other
    inside Redis, which is what separate calls would have been). Each caller gets its own
    reply or the batch's exception.
    """

    def __init__(self, op: str, *, prelude: str = "") -> None:
        """``op``: the body of ``function(KEYS, ARGV)``; ``prelude``: Lua it may call."""
        self.source = _BATCH.replace("__PRELUDE__", prelude).replace("__OP__", op)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        self._commits: GroupCommit[Call, Any] = GroupCommit(self._run)

    async def __call__(self, *, keys: list[str], args: list[str]) -> Any:
        return await self._commits.submit((keys, args))

    @staticmethod
    def packed(calls: Sequence[Call]) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of one run of the script for ``calls`` (see ``_BATCH``)."""
        keys: list[str] = []
        sizes: list[str] = [str(len(calls))]
        args: list[str] = []
        for call_keys, call_args in calls:
            keys += call_keys
            args += call_args
            sizes += [str(len(call_keys)), str(len(call_args))]
        return keys, sizes + args

    def queue(self, pipe: Any, calls: Sequence[Call]) -> None:
        """One ``EVALSHA`` for ``calls`` on a caller's pipeline, so they share its round
        trip; its reply is one reply per call. A ``NoScriptError`` in its place means Redis
        lost the script (a restart): run the calls again through ``__call__``."""
        keys, args = self.packed(calls)
        pipe.evalsha(self.sha, len(keys), *keys, *args)

    async def _run(self, calls: list[Call]) -> Sequence[Any]:
        keys, args = self.packed(calls)
        # EVALSHA (EVAL once where Redis does not know the script yet).
        replies: Sequence[Any] = await script(self.source)(keys=keys, args=args)
        return replies
