"""Gateway overhead: latency and throughput of calls through the gateway vs direct calls.

Three processes: this one (the load generator: httpx async, HTTP keep-alive, a fixed
number of requests in flight), an upstream stub (a raw ASGI app under uvicorn answering
``/v1/chat/completions`` at once with a fixed OpenAI-shaped body, ``usage`` and
``prompt_tokens_details`` included; it stands in for a vLLM worker and is not our code)
and the gateway (the whole ``controlplane.asgi:application`` under uvicorn, one worker).
Baseline in the same run: the same requests sent straight to the stub. Direct and gateway
rounds alternate so drift hits both alike; a short unloaded pass (one request in flight)
follows, which separates the gateway's own cost from queueing at the chosen concurrency.

Set-up (through the services): a tenant, a service account bound to tenant.developer, an
API key, and the stub registered as a worker (``workers.services.worker_register``); no
budget. With DATABASE_URL/REDIS_URL unset, embedded PostgreSQL and Redis are started.
By default the gateway is pinned to the last CPU and the load generator and stub to the
others (``--no-pin`` to let the scheduler place them).

    .venv/bin/python bench/gateway_overhead.py [--concurrency 32] [--requests 6000]

Targets reported against (added latency, gateway - direct): p50 <= 2 ms, p99 <= 10 ms.
The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
MODEL = "bench/stub-model"
TARGET_P50_MS = 2.0
TARGET_P99_MS = 10.0
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

# --- the upstream stub (imported by its own uvicorn process: stdlib only up to here) ---

_STUB_BODY = json.dumps(
    {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 540,
            "completion_tokens": 1,
            "total_tokens": 541,
            "prompt_tokens_details": {"cached_tokens": 512},
        },
    }
).encode()
_STUB_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(_STUB_BODY)).encode()),
]


async def stub_app(scope, receive, send) -> None:
    """Answer every HTTP request at once with the fixed chat completion."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": _STUB_HEADERS})
    await send({"type": "http.response.body", "body": _STUB_BODY})


# --- load generation ---


@dataclass
class Run:
    """Latencies (seconds) and wall time of one batch of requests."""

    latencies: list[float] = field(default_factory=list)
    overheads_ms: list[float] = field(default_factory=list)  # the gateway's own header
    elapsed: float = 0.0
    errors: int = 0
    server_cpu: float = 0.0  # CPU seconds the server process (all its threads) used

    def extend(self, other: Run) -> None:
        self.latencies += other.latencies
        self.overheads_ms += other.overheads_ms
        self.elapsed += other.elapsed
        self.errors += other.errors
        self.server_cpu += other.server_cpu

    @property
    def server_cpu_ms(self) -> float:
        """Server CPU per answered request: steadier than latency on a shared machine."""
        return self.server_cpu / len(self.latencies) * 1e3 if self.latencies else 0.0

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid``, all threads (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0-100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def _drive(clients: list, url: str, body: bytes, headers: dict, total: int) -> Run:
    """``total`` requests, one lane per client (so ``len(clients)`` in flight)."""
    run = Run()
    issued = 0

    async def one_lane(client) -> None:
        nonlocal issued
        while issued < total:
            issued += 1
            start = time.perf_counter()
            response = await client.post(url, content=body, headers=headers)
            elapsed = time.perf_counter() - start
            if response.status_code != 200:
                run.errors += 1
                if run.errors == 1:
                    print(f"  first error from {url}: {response.status_code} {response.text[:300]}")
                continue
            run.latencies.append(elapsed)
            overhead = response.headers.get("x-cacheplane-overhead-ms")
            if overhead is not None:
                run.overheads_ms.append(float(overhead))

    started = time.perf_counter()
    await asyncio.gather(*(one_lane(client) for client in clients))
    run.elapsed = time.perf_counter() - started
    return run


async def _measure(
    args: argparse.Namespace,
    direct_url: str,
    gateway_url: str,
    key: str,
    body: bytes,
    pids: dict[str, int],
) -> dict[str, Run]:
    import httpx

    plain = {"content-type": "application/json"}
    authed = {**plain, "authorization": f"Bearer {key}"}
    targets = {
        "direct": (f"{direct_url}/v1/chat/completions", plain),
        "gateway": (f"{gateway_url}/v1/chat/completions", authed),
    }
    runs = {name: Run() for name in ("direct", "gateway", "direct_serial", "gateway_serial")}
    # One client (one keep-alive connection) per lane: httpx's pool checks every pooled
    # connection on each request, which would make the load generator the bottleneck.
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with contextlib.AsyncExitStack() as stack:
        lanes = {
            name: [
                await stack.enter_async_context(httpx.AsyncClient(limits=one, timeout=60))
                for _ in range(args.concurrency)
            ]
            for name in targets
        }
        for name, (url, headers) in targets.items():  # connections, caches, code paths
            # One request alone first: a cold gateway answers requests that arrive while
            # its worker directory is first loading with 404 model_not_found.
            first = await _drive(lanes[name][:1], url, body, headers, 1)
            warm = await _drive(lanes[name], url, body, headers, args.warmup)
            if first.errors or warm.errors:
                print(f"  {name}: {first.errors + warm.errors} errors during warm-up")
        per_round = max(1, args.requests // args.rounds)
        for round_no in range(args.rounds):
            order = ("direct", "gateway") if round_no % 2 == 0 else ("gateway", "direct")
            for name in order:
                url, headers = targets[name]
                cpu = cpu_seconds(pids[name])
                result = await _drive(lanes[name], url, body, headers, per_round)
                result.server_cpu = cpu_seconds(pids[name]) - cpu
                runs[name].extend(result)
                print(
                    f"  round {round_no + 1}/{args.rounds} {name:7}: "
                    f"{result.throughput:7.0f} req/s  p50 "
                    f"{percentile(result.latencies, 50) * 1e3:6.2f} ms"
                )
        for name in targets:
            url, headers = targets[name]
            runs[f"{name}_serial"] = await _drive(
                lanes[name][:1], url, body, headers, args.serial_requests
            )
    return runs


# --- processes and set-up ---


def _wait_http(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise SystemExit(f"{process.args[3]} exited with {process.returncode} at start")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer within {timeout:.0f} s") from None
            time.sleep(0.1)


@contextlib.contextmanager
def _uvicorn(
    app: str, port: int, *, app_dir: Path, cpus: set[int] | None
) -> Iterator[subprocess.Popen]:
    """``uvicorn app`` in its own process (uvloop, httptools, one worker); stopped on exit."""
    command = [
        sys.executable,
        "-m",
        "uvicorn",
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
    # Django warns at start that collectstatic has not run; irrelevant here.
    env = {**os.environ, "PYTHONWARNINGS": "ignore:No directory at:UserWarning"}
    process = subprocess.Popen(command, cwd=REPO, env=env)
    try:
        if cpus:
            os.sched_setaffinity(process.pid, cpus)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _create_caller(stub_url: str) -> str:
    """Tenant, developer service account, API key, and the stub as the model's worker."""
    from tenants.actor import Actor
    from tenants.services import keys
    from tenants.services.iam import BindingSpec, policy_get, policy_set, service_account_create
    from tenants.services.tenants import human_principal_create, tenant_create
    from workers.services import worker_register

    admin = human_principal_create(actor=Actor.cli(), username="bench-admin", password=None)
    tenant = tenant_create(actor=Actor.cli(), slug="bench-gw", display_name="Bench", admin=admin)
    actor = Actor.cli(principal=admin)
    sa = service_account_create(actor=actor, tenant=tenant, name="loadgen")
    policy = policy_get(tenant=tenant)
    specs = [
        BindingSpec(role=b.role.name, principal_id=str(b.principal_id)) for b in policy.bindings
    ]
    specs.append(BindingSpec(role="tenant.developer", principal_id=str(sa.pk)))
    policy_set(actor=actor, tenant=tenant, etag=policy.etag, bindings=specs)
    issued = keys.api_key_create(actor=actor, tenant=tenant, name="loadgen", principal=sa)
    worker_register(actor=Actor.cli(), name="stub-0", base_url=stub_url, model=MODEL)
    return issued.plaintext


def _request_body() -> bytes:
    """A realistic chat request: ~2 kB of system prompt (32 routing blocks) and a question."""
    system = "You are the support assistant of Globex. Policies follow. " * 36
    return json.dumps(
        {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "How do I return a damaged item?"},
            ],
            "max_tokens": 16,
            "temperature": 0,
        }
    ).encode()


def _usage_queue_length() -> int:
    from billing.services.usage import queue_key
    from controlplane.ops import redis_client

    return int(redis_client().llen(queue_key()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--requests",
        type=int,
        default=6000,
        help="measured requests per path (split over --rounds)",
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--serial-requests", type=int, default=500)
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    args = parser.parse_args()

    sys.path.insert(0, str(BENCH_DIR))
    from support import scratch_django

    from controlplane.embedded import free_port

    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    gateway_cpus = {cpus[-1]} if pin else None
    other_cpus = set(cpus[:-1]) if pin else None
    with scratch_django("gateway_overhead"):
        if other_cpus:
            os.sched_setaffinity(0, other_cpus)
        stub_port, gateway_port = free_port(), free_port()
        stub_url = f"http://127.0.0.1:{stub_port}"
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        key = _create_caller(stub_url)
        body = _request_body()
        with (
            _uvicorn(
                "gateway_overhead:stub_app", stub_port, app_dir=BENCH_DIR, cpus=other_cpus
            ) as stub,
            _uvicorn(
                "controlplane.asgi:application", gateway_port, app_dir=REPO, cpus=gateway_cpus
            ) as gateway,
        ):
            _wait_http(f"{stub_url}/", stub)
            _wait_http(f"{gateway_url}/v1/models", gateway)  # 401 without a key: up
            queued_before = _usage_queue_length()
            import httpx
            import uvloop

            print(
                f"set-up: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
                f"Python {platform.python_version()}, httpx {httpx.__version__}; "
                f"concurrency {args.concurrency}, {args.requests} measured requests per path "
                f"in {args.rounds} alternating rounds after {args.warmup} warm-up each, then "
                f"{args.serial_requests} at concurrency 1; uvicorn: 1 worker per server, "
                f"--loop uvloop --http httptools; load generator on uvloop; request body "
                f"{len(body)} bytes; load average {os.getloadavg()[0]:.2f}; "
                + (
                    f"gateway pinned to CPU {sorted(gateway_cpus)}, load generator and stub "
                    f"to CPU {sorted(other_cpus)}"
                    if pin
                    else "no CPU pinning"
                )
            )
            pids = {"direct": stub.pid, "gateway": gateway.pid}
            runs = uvloop.run(_measure(args, stub_url, gateway_url, key, body, pids))
            metered = _usage_queue_length() - queued_before
    return _report(args, runs, metered)


def _report(args: argparse.Namespace, runs: dict[str, Run], metered: int) -> int:
    def ms(run: Run, q: float) -> float:
        return percentile(run.latencies, q) * 1e3

    direct, gateway = runs["direct"], runs["gateway"]
    print(
        f"{'path':16} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'p99 ms':>8} {'errors':>6}"
    )
    for name, run in runs.items():
        print(
            f"{name:16} {len(run.latencies):8} {run.throughput:8.0f} {ms(run, 50):8.2f} "
            f"{ms(run, 95):8.2f} {ms(run, 99):8.2f} {run.errors:6}"
        )
    added = {q: ms(gateway, q) - ms(direct, q) for q in (50, 95, 99)}
    serial = {q: ms(runs["gateway_serial"], q) - ms(runs["direct_serial"], q) for q in (50, 99)}
    ratio = gateway.throughput / direct.throughput
    own = percentile(gateway.overheads_ms, 50) if gateway.overheads_ms else float("nan")
    own_serial = percentile(runs["gateway_serial"].overheads_ms, 50)
    total_gateway = (
        sum(len(runs[n].latencies) + runs[n].errors for n in ("gateway", "gateway_serial"))
        + args.warmup
        + 1
    )
    met_p50, met_p99 = added[50] <= TARGET_P50_MS, added[99] <= TARGET_P99_MS
    print(
        f"added latency at concurrency {args.concurrency} (gateway - direct): "
        f"p50 {added[50]:.2f} ms, p95 {added[95]:.2f} ms, p99 {added[99]:.2f} ms"
    )
    print(f"added latency at concurrency 1: p50 {serial[50]:.2f} ms, p99 {serial[99]:.2f} ms")
    print(
        f"gateway's own x-cacheplane-overhead-ms, median: {own:.2f} ms at concurrency "
        f"{args.concurrency}, {own_serial:.2f} ms at concurrency 1"
    )
    print(
        f"server CPU per request: gateway {gateway.server_cpu_ms:.3f} ms, stub "
        f"{direct.server_cpu_ms:.3f} ms (direct runs)"
    )
    print(
        f"throughput ratio gateway/direct: {ratio:.2f} "
        f"({gateway.throughput:.0f} vs {direct.throughput:.0f} req/s)"
    )
    print(
        f"usage records queued by the gateway: {metered} of {total_gateway} requests; "
        f"load average at the end {os.getloadavg()[0]:.2f} (other work on this machine "
        f"skews every figure)"
    )
    print(
        f"targets: added p50 <= {TARGET_P50_MS:g} ms {'met' if met_p50 else 'MISSED'}, "
        f"added p99 <= {TARGET_P99_MS:g} ms {'met' if met_p99 else 'MISSED'}"
    )
    print(
        f"RESULT concurrency={args.concurrency} requests={len(gateway.latencies)} "
        f"direct_p50_ms={ms(direct, 50):.2f} direct_p99_ms={ms(direct, 99):.2f} "
        f"gateway_p50_ms={ms(gateway, 50):.2f} gateway_p99_ms={ms(gateway, 99):.2f} "
        f"added_p50_ms={added[50]:.2f} added_p95_ms={added[95]:.2f} "
        f"added_p99_ms={added[99]:.2f} serial_added_p50_ms={serial[50]:.2f} "
        f"direct_rps={direct.throughput:.0f} gateway_rps={gateway.throughput:.0f} "
        f"throughput_ratio={ratio:.2f} gateway_cpu_ms_per_request={gateway.server_cpu_ms:.3f} "
        f"errors={direct.errors + gateway.errors} "
        f"target_p50_met={met_p50} target_p99_met={met_p99}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
