"""Load generation and server processes of ``bench/gateway_overhead.py``.

The load generator is aiohttp with one keep-alive connection per lane; a server under test
runs as its own process (optionally pinned to CPUs, optionally under cProfile) and its CPU
time is read from ``/proc`` around each batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from support import stop_process

REPO = Path(__file__).resolve().parent.parent
UVICORN_FLAGS = [
    "--loop",
    "uvloop",
    "--http",
    "httptools",
    "--lifespan",
    "off",
    "--no-access-log",
    "--log-level",
    "warning",
]


@dataclass
class Run:
    """Latencies (seconds), wall time and server CPU of one batch of requests."""

    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    errors: int = 0
    server_cpu: float = 0.0

    @property
    def server_cpu_ms(self) -> float:
        return self.server_cpu / len(self.latencies) * 1e3 if self.latencies else 0.0

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    def p(self, q: float) -> float:
        return percentile(self.latencies, q) * 1e3 if self.latencies else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid``, all threads (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0-100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def drive(clients: list, url: str, body: bytes, headers: dict, total: int) -> Run:
    """``total`` requests, one lane per client (so ``len(clients)`` in flight)."""
    import aiohttp

    run = Run()
    issued = 0

    async def one_lane(client) -> None:
        nonlocal issued
        while issued < total:
            issued += 1
            start = time.perf_counter()
            try:
                async with client.post(url, data=body, headers=headers) as response:
                    content = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError) as exc:  # an error, not a crash
                run.errors += 1
                print(f"  transport error from {url}: {exc!r}")
                continue
            elapsed = time.perf_counter() - start
            if status != 200 or b"error" in content[:200]:
                run.errors += 1
                if run.errors == 1:
                    print(f"  first error from {url}: {status} {content[:300]!r}")
                continue
            run.latencies.append(elapsed)

    started = time.perf_counter()
    await asyncio.gather(*(one_lane(client) for client in clients))
    run.elapsed = time.perf_counter() - started
    return run


async def measure_target(
    name: str, url: str, headers: dict, pid: int | None, bodies: dict, args
) -> dict[tuple[int, str], Run]:
    import aiohttp

    results: dict[tuple[int, str], Run] = {}
    async with contextlib.AsyncExitStack() as stack:
        # One keep-alive connection per lane (aiohttp: the cheapest Python client we
        # measured, so the load generator is not what limits the servers under test).
        lanes = [
            await stack.enter_async_context(
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=1),
                    timeout=aiohttp.ClientTimeout(total=60),
                )
            )
            for _ in range(max(args.concurrency))
        ]
        for mode, body in bodies.items():
            await drive(lanes[:1], url, body, headers, 1)  # a cold server's first request
            await drive(lanes, url, body, headers, args.warmup)
            for concurrency in args.concurrency:
                total = args.requests if concurrency > 1 else args.requests // 3
                cpu = cpu_seconds(pid) if pid else 0.0
                run = await drive(lanes[:concurrency], url, body, headers, total)
                run.server_cpu = (cpu_seconds(pid) - cpu) if pid else 0.0
                results[(concurrency, mode)] = run
                print(
                    f"  {name:8} {mode:6} c{concurrency:<3} {run.throughput:7.0f} req/s  "
                    f"p50 {run.p(50):6.2f} ms  p99 {run.p(99):6.2f} ms  "
                    f"cpu {run.server_cpu_ms:5.2f} ms/req  errors {run.errors}"
                )
    return results


# --- processes and set-up ---


@contextlib.contextmanager
def server_process(command: list[str], *, cpus: set[int] | None, env: dict | None = None):
    """A server process, pinned to ``cpus``; stopped on exit."""
    process = subprocess.Popen(
        command,
        cwd=REPO,
        # A proxy must not see our DATABASE_URL (LiteLLM would try to use it): only ours.
        env={
            **{k: v for k, v in os.environ.items() if env is None or k not in _OURS},
            "PYTHONWARNINGS": "ignore",
            **(env or {}),
        },
        stdout=subprocess.DEVNULL,
    )
    try:
        if cpus:
            os.sched_setaffinity(process.pid, cpus)
        yield process
    finally:
        stop_process(process)


_OURS = ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")


#: ``BENCH_PROFILE_GATEWAY=out.prof``: the gateway runs under cProfile, written when it is
#: stopped (uvicorn re-raises SIGTERM after its shutdown: the handler below catches it).
_PROFILED = (
    "import cProfile, os, signal, sys, time, uvicorn\n"
    "out = sys.argv.pop(1)\n"
    "profile = cProfile.Profile(time.process_time)\n"
    "def stop(*_):\n"
    "    profile.disable(); profile.dump_stats(out); os._exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "profile.enable()\n"
    "uvicorn.main()\n"
)


def uvicorn_command(app: str, port: int, app_dir: Path) -> list[str]:
    profile = os.environ.get("BENCH_PROFILE_GATEWAY") if app.startswith("controlplane") else None
    return [
        sys.executable,
        *(["-c", _PROFILED, profile] if profile else ["-m", "uvicorn"]),
        app,
        "--app-dir",
        str(app_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        *UVICORN_FLAGS,
    ]
