"""After a Redis restart, the gateway's pooled connections reconnect instead of failing
a request each (found by ``test_faults_under_load``: a 503 ``limits_unavailable`` minutes
after Redis came back, on a connection that had been idle in the pool since).

A private redis-server of its own (the embedded one, in a temporary folder), never the
session's Redis.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from controlplane.embedded import EmbeddedRedis
from controlplane.redis import clients as hotpath_redis


def test_every_pooled_connection_survives_a_redis_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any idle time counts as idle (the restart itself takes longer than this).
    monkeypatch.setattr(hotpath_redis, "HEALTH_CHECK_SECONDS", 0.001, raising=False)
    server = EmbeddedRedis(tmp_path / "redis", persist=True)
    server.start()

    async def scenario() -> list[str]:
        pool = hotpath_redis.connection_pool(server.url)
        # The embedded redis-server (6.2) refuses CLIENT SETINFO on connect.
        pool.connection_kwargs.update(lib_name=None, lib_version=None)
        client = aioredis.Redis(connection_pool=pool)
        script = client.register_script("return redis.call('INCR', KEYS[1])")
        try:
            # Eight concurrent calls: eight connections in the pool, all idle afterwards.
            await asyncio.gather(*[script(keys=["n"]) for _ in range(8)])
            server.stop()
            server.start()
            failures = []
            for _ in range(8):  # one after another, as a quiet gateway draws them
                try:
                    await script(keys=["n"])
                except Exception as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
            return failures
        finally:
            await client.aclose()

    try:
        failures = asyncio.run(scenario())
        assert failures == []
        # The script ran once per call: 8 before and 8 after (the append-only file kept
        # the count), none repeated by the reconnect.
        import redis

        assert int(redis.Redis.from_url(server.url).get("n") or 0) == 16
    finally:
        server.stop()
