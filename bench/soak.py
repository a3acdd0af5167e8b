"""Soak: REST and gateway traffic at fixed concurrency against a whole `cacheplane up`,
with PostgreSQL connections sampled from pg_stat_activity, and log volume at idle and
under load.

What runs: `cacheplane up` (embedded PostgreSQL and Redis, web, Celery worker and beat,
Vertex emulator; no reference worker) on --port, an upstream stub standing in for a vLLM
worker (bench/gateway_stub.py, not our code) on --port + 1, and this load
generator. The benchmark attaches to up's embedded services (it never owns them) to
create a tenant, a developer service account and its API key, and to register the stub.

Phases: --idle-seconds with no traffic (log bytes per minute at idle), then --seconds at
--concurrency: each client alternates GET /api/v1/tenants/{t}/caches (REST, Django) and
POST /v1/chat/completions (gateway: auth, routing, metering). Every 0.5 s the connections
per application_name are counted. Checks: the web process never holds more connections
than its pool (CACHEPLANE_DB_POOL_MAX_SIZE), and 0 errors (any non-2xx or transport
error).

    .venv/bin/python bench/soak.py [--seconds 300] [--concurrency 64] [--port 18300]

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH_DIR))


_METRICS = (
    b"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.1\n"
    b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
)


async def stub_app(scope, receive, send) -> None:
    """The upstream stand-in: gateway_stub's fixed chat completion, plus /health and
    Prometheus /metrics so the control plane's probe keeps it healthy."""
    from gateway_stub import stub_app as completion_app

    if scope["type"] == "http" and scope["path"] in ("/health", "/metrics"):
        body = _METRICS if scope["path"] == "/metrics" else b"ok"
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await completion_app(scope, receive, send)


def _log_sizes(logs: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in logs.glob("*.log")}


def _per_minute(before: dict[str, int], after: dict[str, int], seconds: float) -> dict:
    return {
        name: round((after.get(name, 0) - before.get(name, 0)) * 60 / seconds)
        for name in sorted(after)
    }


def _log_kinds(path: Path) -> Counter:
    """JSON log lines counted by (logger, level): what fills a log."""
    kinds: Counter = Counter()
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return kinds
    for line in text.splitlines():
        try:
            record = json.loads(line)
            kinds[f"{record.get('logger')}:{record.get('level')}"] += 1
        except ValueError:
            kinds["(not json)"] += 1
    return kinds


class ConnectionSampler(threading.Thread):
    """Counts backends per application_name in the cacheplane database twice a second."""

    def __init__(self, socket_dir: str) -> None:
        super().__init__(daemon=True)
        self.socket_dir = socket_dir
        self.max_by_app: Counter = Counter()
        self.max_total = 0
        self.samples = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(
            host=self.socket_dir, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            while not self.stop_event.is_set():
                rows = conn.execute(
                    "SELECT application_name, count(*) FROM pg_stat_activity "
                    "WHERE datname = 'cacheplane' AND backend_type = 'client backend' "
                    "GROUP BY 1"
                ).fetchall()
                total = 0
                for name, count in rows:
                    self.max_by_app[name] = max(self.max_by_app[name], count)
                    total += count
                self.max_total = max(self.max_total, total)
                self.samples += 1
                self.stop_event.wait(0.5)  # sampling period


async def _client(http, deadline: float, slug: str, key: str, body: bytes, tally: Counter):
    import httpx

    headers = {"Authorization": f"Bearer {key}"}
    rest = f"/api/v1/tenants/{slug}/caches"
    turn = 0
    while time.monotonic() < deadline:
        turn += 1
        path = "rest" if turn % 2 else "gateway"
        try:
            if path == "rest":
                response = await http.get(rest, headers=headers)
            else:
                response = await http.post(
                    "/v1/chat/completions",
                    content=body,
                    headers={**headers, "Content-Type": "application/json"},
                )
            tally[f"{path}_{response.status_code}"] += 1
            if response.status_code >= 300:
                tally["errors"] += 1
                try:
                    code = response.json()["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    code = response.text[:40]
                tally[f"error_{path}:{response.status_code}:{code}"] += 1
        except httpx.HTTPError as exc:
            tally["errors"] += 1
            tally[f"error_transport:{type(exc).__name__}"] += 1


async def _load(url: str, seconds: float, concurrency: int, slug: str, key: str) -> Counter:
    import httpx
    from gateway_stub import MODEL

    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "How do I return a damaged item?"}],
            "max_tokens": 8,
        }
    ).encode()
    tally: Counter = Counter()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        deadline = time.monotonic() + seconds
        await asyncio.gather(
            *(_client(http, deadline, slug, key, body, tally) for _ in range(concurrency))
        )
    return tally


def _start_up(args: argparse.Namespace, data_dir: Path, env: dict[str, str]) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "up", "--no-demo", "--port", str(args.port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout], daemon=True
    ).start()
    seen = ""
    deadline = time.monotonic() + 300
    while "Press Ctrl-C" not in seen:
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"cacheplane up did not start:\n{seen}")
        try:
            seen += lines.get(timeout=1)
        except queue.Empty:
            pass
    return process


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="load phase length")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="idle phase length")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--port", type=int, default=18300, help="web; the stub uses port+1")
    parser.add_argument("--pool-max", type=int, default=20, help="CACHEPLANE_DB_POOL_MAX_SIZE")
    parser.add_argument("--keep", action="store_true", help="keep the data dir (logs)")
    parser.add_argument(
        "--no-pool",
        action="store_true",
        help="baseline: CACHEPLANE_DB_POOL=false (persistent per-thread connections)",
    )
    args = parser.parse_args()

    base = REPO / ".cacheplane" / "bench-runs"
    base.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(dir=base, prefix="soak-"))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DATABASE_MIGRATE_URL"}
    }
    env.update(
        {
            "CACHEPLANE_DATA_DIR": str(data_dir),
            "CACHEPLANE_NO_DEMO_WORKER": "1",
            "CACHEPLANE_ADMIN_PASSWORD": "soak-admin-password-1",
            "CACHEPLANE_DB_POOL_MAX_SIZE": str(args.pool_max),
            "CACHEPLANE_LOG_LEVEL": "INFO",
            "CACHEPLANE_DB_POOL": "false" if args.no_pool else "true",
        }
    )
    from gateway_load import server_process, uvicorn_command
    from support import wait_http

    stub_port = args.port + 1
    stub_url = f"http://127.0.0.1:{stub_port}"
    up = _start_up(args, data_dir, env)
    services = None
    try:
        with server_process(
            uvicorn_command("soak:stub_app", stub_port, BENCH_DIR), cpus=None
        ) as stub:
            wait_http(f"{stub_url}/", stub)
            from controlplane.embedded import EmbeddedServices

            for name in ("DATABASE_URL", "REDIS_URL", "DATABASE_MIGRATE_URL"):
                os.environ.pop(name, None)
            os.environ["CACHEPLANE_DATA_DIR"] = str(data_dir)
            # API keys are hashed with the secret key: use the one up generated.
            os.environ["CACHEPLANE_SECRET_KEY"] = (data_dir / "secret_key").read_text().strip()
            services = EmbeddedServices(data_dir, roles=True)
            os.environ.update(services.start())
            assert not services.postgres.owned and not services.redis.owned
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
            os.environ["CACHEPLANE_LOG_LEVEL"] = "WARNING"
            import django

            django.setup()
            from gateway_overhead import _create_caller

            key = _create_caller(stub_url)
            sampler = ConnectionSampler(services.postgres.socket_dir)
            sampler.start()

            logs = data_dir / "logs"
            idle_before = _log_sizes(logs)
            time.sleep(args.idle_seconds)  # the idle phase: no traffic at all
            idle_rates = _per_minute(idle_before, _log_sizes(logs), args.idle_seconds)

            url = f"http://127.0.0.1:{args.port}"
            load_before = _log_sizes(logs)
            started = time.monotonic()
            tally = asyncio.run(_load(url, args.seconds, args.concurrency, "bench-gw", key))
            elapsed = time.monotonic() - started
            load_rates = _per_minute(load_before, _log_sizes(logs), elapsed)
            log_lines = {name: _log_kinds(logs / name) for name in ("web.log", "celery-worker.log")}
            sampler.stop_event.set()
            sampler.join(timeout=5)
            alive = up.poll() is None
    finally:
        if services is not None:
            services.stop()  # attached: lets go, stops nothing
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
            try:
                up.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
        if args.keep:
            print(f"data and logs kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)

    requests = sum(v for k, v in tally.items() if k.startswith(("rest_", "gateway_")))
    web = sampler.max_by_app.get("cacheplane-web", 0)
    print(
        f"set-up: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
        f"cacheplane up (web: 1 uvicorn process, Celery worker concurrency 2), pool max "
        f"{args.pool_max} per process; {args.concurrency} clients for {elapsed:.0f} s "
        f"alternating REST GET caches and gateway chat completions (stub upstream)"
    )
    print(f"responses: {dict(sorted((k, v) for k, v in tally.items() if '_' in k))}")
    for name in ("web.log", "celery-worker.log"):
        print(f"{name} lines by logger and level: {dict(log_lines.get(name, {}))}")
    print(f"max connections per application_name: {dict(sampler.max_by_app)}")
    print(f"max connections total: {sampler.max_total} ({sampler.samples} samples)")
    print(f"log bytes/minute at idle: {idle_rates}")
    print(f"log bytes/minute under load: {load_rates}")
    ok = tally["errors"] == 0 and (args.no_pool or web <= args.pool_max) and alive
    print(
        f"RESULT seconds={elapsed:.0f} concurrency={args.concurrency} requests={requests} "
        f"rps={requests / elapsed:.0f} errors={tally['errors']} web_conn_max={web} "
        f"pool_max={0 if args.no_pool else args.pool_max} db_conn_max_total={sampler.max_total} "
        f"celery_log_idle_bpm={idle_rates.get('celery-worker.log', 0)} "
        f"celery_log_load_bpm={load_rates.get('celery-worker.log', 0)} "
        f"web_log_load_bpm={load_rates.get('web.log', 0)} up_alive={int(alive)} "
        f"ok={int(ok)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
