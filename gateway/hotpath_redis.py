"""The gateway's hot-path Redis connections (one per event loop) and batched scripts.

The hot path talks to Redis without a thread hop and through ``gateway.lean_redis`` (a
pipelined connection with the ``hiredis`` parser, about a quarter of redis-py's CPU per
call): the admission and closing scripts (rate limits, budget holds, their settlement)
and the routing reads. One connection carries every concurrent request of its loop:
commands are pipelined, never waiting for each other's replies.
"""

from __future__ import annotations

import asyncio
import hashlib

from django.conf import settings

from gateway.lean_redis import Connection

_connections: dict[tuple[int, str, float], tuple[asyncio.AbstractEventLoop, Connection]] = {}


def connection(*, url: str | None = None, timeout: float = 10.0) -> Connection:
    """The running loop's connection to ``url`` (default ``REDIS_URL``) with ``timeout``
    per reply (a restarted loop, e.g. in tests, gets its own)."""
    loop = asyncio.get_running_loop()
    url = url or settings.REDIS_URL
    key = (id(loop), url, timeout)
    entry = _connections.get(key)
    if entry is None or entry[0] is not loop:
        if len(_connections) > 32:  # loops of finished test servers
            _connections.clear()
        entry = _connections[key] = (loop, Connection(url, timeout=timeout))
    return entry[1]


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


class BatchedScript:
    """A Lua script run for every caller of one event loop in shared round trips.

    Group commit: calls that arrive while a batch is on its way to Redis go together in
    the next one (one ``EVALSHA`` for all of them, each call still its own atomic step
    in the order it arrived: the script runs them one after the other inside Redis,
    which is what separate calls would have been). One call alone costs one round trip,
    as before; under load the client's cost per call (packing, the connection, the
    reply) is shared. Each caller gets its own reply or the batch's exception.
    """

    MAX_BATCH = 64

    def __init__(self, op: str, *, prelude: str = "") -> None:
        """``op``: the body of ``function(KEYS, ARGV)``; ``prelude``: Lua it may call."""
        self.source = _BATCH.replace("__PRELUDE__", prelude).replace("__OP__", op)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        self._loops: dict[int, tuple[asyncio.AbstractEventLoop, _Batches]] = {}

    async def __call__(self, *, keys: list[str], args: list[str]):
        loop = asyncio.get_running_loop()
        entry = self._loops.get(id(loop))
        if entry is None or entry[0] is not loop:
            if len(self._loops) > 16:  # loops of finished test servers
                self._loops.clear()
            entry = self._loops[id(loop)] = (loop, _Batches())
        batches = entry[1]
        done = loop.create_future()
        batches.pending.append((keys, args, done))
        if batches.writer is None or batches.writer.done():
            batches.writer = loop.create_task(self._write(batches))
        return await done

    async def _write(self, batches: _Batches) -> None:
        while batches.pending:
            batch = batches.pending[: self.MAX_BATCH]
            del batches.pending[: self.MAX_BATCH]
            keys: list[str] = []
            sizes: list[str] = [str(len(batch))]
            args: list[str] = []
            for call_keys, call_args, _ in batch:
                keys += call_keys
                args += call_args
                sizes += [str(len(call_keys)), str(len(call_args))]
            try:
                replies = await connection().evalsha(self.sha, self.source, keys, sizes + args)
            except Exception as exc:
                for _, _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for (_, _, done), reply in zip(batch, replies, strict=True):
                if not done.done():  # its caller was cancelled: the step ran anyway
                    done.set_result(reply)


class _Batches:
    def __init__(self) -> None:
        self.pending: list[tuple[list[str], list[str], asyncio.Future]] = []
        self.writer: asyncio.Task | None = None
