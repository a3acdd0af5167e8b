"""Gateway throughput of one process against two sharing the same Redis and PostgreSQL.

Everything on, as in ``bench/gateway_overhead.py`` (a priced pool, a hard budget, a
tenant rate limit, metering): every request reserves and settles its budget hold, counts
its rate-limit windows and routes through the shared fleet state in Redis. The upstream is
the stub worker (``bench/gateway_stub.py``: answers at once), so what is measured is the
gateways' own work.

Three rows, each ``--requests`` chat completions at ``--concurrency`` lanes:

- ``one``: one gateway process pinned to the last CPU;
- ``two_same_cpu``: two processes, both pinned to that CPU: the same CPU budget, so the
  ratio to ``one`` is the cost of sharing state between processes (1.0 = none);
- ``two_cpus``: two processes, one per CPU: the scale-out. On a 2-core machine the load
  generator, the stub, PostgreSQL and Redis then share the CPUs with the gateways, so
  this ratio is a floor, not what N machines give (docs/deploy.md, "Capacity").

Without DATABASE_URL/REDIS_URL, embedded servers are started (pinned with the load
generator on the first CPU).

    .venv/bin/python bench/gateway_scale_out.py [--requests 2000] [--concurrency 16]

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

from gateway_load import drive, server_process, uvicorn_command
from gateway_overhead import _bodies, _create_caller
from support import wait_http

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


async def _load(urls: list[str], key: str, body: bytes, *, total: int, lanes: int) -> float:
    """Requests per second of ``total`` requests, lanes spread evenly over ``urls``."""
    import aiohttp

    headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
    async with contextlib.AsyncExitStack() as stack:
        sessions = [
            await stack.enter_async_context(
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=1),
                    timeout=aiohttp.ClientTimeout(total=60),
                )
            )
            for _ in range(lanes)
        ]
        groups = [sessions[i :: len(urls)] for i in range(len(urls))]
        endpoints = [f"{url}/v1/chat/completions" for url in urls]
        warm = [drive(g, u, body, headers, 50) for g, u in zip(groups, endpoints, strict=True)]
        await asyncio.gather(*warm)
        started = time.perf_counter()
        runs = await asyncio.gather(
            *(
                drive(g, u, body, headers, total // len(urls))
                for g, u in zip(groups, endpoints, strict=True)
            )
        )
        elapsed = time.perf_counter() - started
    errors = sum(r.errors for r in runs)
    if errors:
        print(f"  {errors} errors")
    return sum(len(r.latencies) for r in runs) / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH_DIR))
    import uvloop
    from support import scratch_django

    from controlplane.embedded import free_port

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("needs 2 CPUs")
        return 1
    first, last = {cpus[0]}, {cpus[-1]}
    os.sched_setaffinity(0, first)  # the load generator (and embedded servers it starts)
    print(f"set-up: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start")
    rows: dict[str, float] = {}
    with scratch_django("gateway_scale_out"):
        stub_port = free_port()
        stub_url = f"http://127.0.0.1:{stub_port}"
        key = _create_caller(stub_url)
        body = _bodies()["plain"]
        with server_process(
            uvicorn_command("gateway_stub:stub_app", stub_port, BENCH_DIR), cpus=first
        ) as stub:
            wait_http(f"{stub_url}/", stub)
            layouts = {"one": [last], "two_same_cpu": [last, last], "two_cpus": [last, first]}
            for name, pins in layouts.items():
                with contextlib.ExitStack() as stack:
                    urls = []
                    for cpu_set in pins:
                        port = free_port()
                        process = stack.enter_context(
                            server_process(
                                uvicorn_command("controlplane.asgi:application", port, REPO),
                                cpus=cpu_set,
                            )
                        )
                        wait_http(f"http://127.0.0.1:{port}/v1/models", process)
                        urls.append(f"http://127.0.0.1:{port}")
                    rows[name] = uvloop.run(
                        _load(urls, key, body, total=args.requests, lanes=args.concurrency)
                    )
                print(f"  {name:13} {rows[name]:7.0f} req/s  ({len(pins)} process(es))")
    load = os.getloadavg()[0]
    print(
        "RESULT "
        f"one_rps={rows['one']:.0f} two_same_cpu_rps={rows['two_same_cpu']:.0f} "
        f"two_cpus_rps={rows['two_cpus']:.0f} "
        f"same_cpu_ratio={rows['two_same_cpu'] / rows['one']:.2f} "
        f"two_cpus_ratio={rows['two_cpus'] / rows['one']:.2f} "
        f"concurrency={args.concurrency} load_avg={load:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
