"""Group commit on one event loop, and Lua scripts run for a batch of callers at once.

The gateway's admission and closing scripts (rate limits, budget holds, their
settlement) are one ``EVALSHA`` per batch of concurrent requests (:class:`BatchedScript`),
each request still its own atomic step inside Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from controlplane.loop_local import LoopLocal
from controlplane.redis.clients import async_client
from controlplane.redis.scripts import Script

Item = TypeVar("Item")
Reply = TypeVar("Reply")


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
        self._loops: LoopLocal[_Batches[Item, Reply]] = LoopLocal(_Batches)

    async def submit(self, item: Item) -> Reply:
        batches = self._loops.get()
        loop = asyncio.get_running_loop()
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


#: One caller's KEYS and ARGV of a batched script.
Call = tuple[list[str], list[str]]


class BatchedScript:
    """A Lua script run for every caller of one event loop in shared round trips.

    The script includes ``batch_run.lua`` after defining ``op(KEYS, ARGV)``. Group commit
    (:class:`GroupCommit`): calls that arrive while a batch is on its way to Redis go
    together in the next one (one ``EVALSHA`` for all of them, each call still its own
    atomic step in the order it arrived: the script runs them one after the other inside
    Redis, which is what separate calls would have been). Each caller gets its own reply
    or the batch's exception.
    """

    def __init__(self, script: Script) -> None:
        self.script = script
        self._commits: GroupCommit[Call, Any] = GroupCommit(self._run)

    async def __call__(self, *, keys: list[str], args: list[str]) -> Any:
        return await self._commits.submit((keys, args))

    @staticmethod
    def packed(calls: Sequence[Call]) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of one run of the script for ``calls`` (see ``batch_run.lua``)."""
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
        self.script.queue(pipe, keys=keys, args=args)

    async def _run(self, calls: list[Call]) -> Sequence[Any]:
        keys, args = self.packed(calls)
        replies: Sequence[Any] = await self.script.run_async(async_client(), keys=keys, args=args)
        return replies
