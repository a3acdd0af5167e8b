"""Gateway overhead with everything on, beside LiteLLM's proxy and vllm-router.

Processes: this one (the load generator: aiohttp on uvloop, one keep-alive connection per
lane), an upstream stub (a raw ASGI app answering ``/v1/chat/completions`` at once, plain
or streamed, with ``usage``: a vLLM worker with no model), and, one at a time, the
servers under test, all against the same stub:

- ``gateway``: the whole ``controlplane.asgi:application`` under uvicorn (one worker)
  with the production shape on: a priced pool (the stub's), a hard monthly budget (every
  request reserves and settles in Redis), a tenant rate limit (requests/min, tokens/min
  and concurrency, high enough never to refuse) and metering to the ledger queue;
- ``litellm``: LiteLLM's proxy from PyPI in its own virtual environment (``--litellm``,
  default ``/tmp/gw-litellm``), one worker, no database;
- ``router``: vllm-router from PyPI (``--router``, default ``/tmp/gw-router``), the floor:
  no auth, budget or metering;
- ``direct``: the stub itself (shows the load generator is not the bottleneck).

The stub is ``bench/gateway_stub.py``, the load generator and process handling
``bench/gateway_load.py``.

Concurrency 1, 8 and 32, plain and streaming. Servers under test are pinned to the last
CPU; the load generator, the stub and (without ``DATABASE_URL``/``REDIS_URL``) the
embedded PostgreSQL and Redis to the others, as in a deployment where they run on other
hosts (``--no-pin`` to let the scheduler place everything). Ratios to LiteLLM and the
router come from the same run.

    .venv/bin/python bench/gateway_overhead.py [--requests 1500] [--quick]

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from gateway_load import Run, measure_target, server_process, uvicorn_command
from gateway_stub import MODEL
from support import wait_http

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
LITELLM_KEY = "sk-bench-" + "0123456789abcdef" * 2  # LiteLLM refuses to start without one
TARGET_P50_MS = 2.0
TARGET_P99_MS = 10.0


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
    worker_register(actor=Actor.cli(), name="stub-0", base_url=stub_url, model=MODEL, pool="bench")
    _everything_on(tenant=tenant, actor=actor)
    return issued.plaintext


def _everything_on(*, tenant, actor) -> None:
    """The production shape: a priced pool, a hard budget, a tenant rate limit."""
    from billing.services.budgets import budget_create
    from billing.services.prices import pool_price_create
    from gateway.services import rate_limit_create

    pool_price_create(
        actor=actor,
        pool="bench",
        source="bench",
        rates={
            "gpu_hour_usd": "2.50",
            "prefill_tokens_per_gpu_second": "20000",
            "decode_tokens_per_gpu_second": "2000",
            "kv_blocks_per_gpu": 20000,
        },
    )
    budget_create(
        actor=actor,
        tenant=tenant,
        name="bench",
        period="month",
        limit_micros=10**13,
        hard_limit=True,
    )
    rate_limit_create(
        tenant=tenant,
        actor=actor,
        api_key_id=None,
        values={
            "requests_per_minute": 10**8,
            "tokens_per_minute": 10**11,
            "concurrent_requests": 10**4,
        },
    )


def _bodies() -> dict[str, bytes]:
    """A realistic chat request: ~2 kB of system prompt and a question; and its stream."""
    system = "You are the support assistant of Globex. Policies follow. " * 36
    base = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "How do I return a damaged item?"},
        ],
        "max_tokens": 16,
        "temperature": 0,
    }
    return {
        "plain": json.dumps(base).encode(),
        "stream": json.dumps({**base, "stream": True}).encode(),
    }


def _litellm_config(stub_url: str) -> Path:
    path = Path(f"/tmp/gw-litellm-{os.getpid()}.yaml")
    path.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {stub_url}/v1\n"
        "      api_key: unused\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_KEY}\n"
    )
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1500, help="per cell at c8 and c32")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--litellm", default="/tmp/gw-litellm", help="LiteLLM's venv")
    parser.add_argument("--router", default="/tmp/gw-router", help="vllm-router's venv")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument(
        "--port-base",
        type=int,
        default=int(os.environ.get("BENCH_PORT_BASE", "0")),
        help="servers listen on consecutive ports from here (default: any free ports)",
    )
    args = parser.parse_args()

    sys.path.insert(0, str(BENCH_DIR))
    from support import scratch_django

    from controlplane.embedded import free_port

    taken = iter(range(args.port_base, args.port_base + 100)) if args.port_base else None

    def next_port() -> int:
        return next(taken) if taken is not None else free_port()

    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    server_cpus = {cpus[-1]} if pin else None
    other_cpus = set(cpus[:-1]) if pin else None
    bodies = _bodies()
    results: dict[str, dict] = {}
    if other_cpus:
        # Before the embedded PostgreSQL and Redis start, so they inherit it: a shared
        # service on the server's CPU would bill its work to whichever server uses it.
        os.sched_setaffinity(0, other_cpus)
    embedded = not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"))
    with scratch_django("gateway_overhead"):
        stub_port = next_port()
        stub_url = f"http://127.0.0.1:{stub_port}"
        key = _create_caller(stub_url)
        import uvloop

        print(
            f"set-up: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
            f"Python {platform.python_version()}; load average {os.getloadavg()[0]:.2f}; "
            + (
                f"servers under test pinned to CPU {sorted(server_cpus)}, load generator, "
                f"stub{', PostgreSQL and Redis' if embedded else ''} to CPU {sorted(other_cpus)}"
                + (
                    ""
                    if embedded
                    else " (DATABASE_URL/REDIS_URL given: those servers are not pinned and"
                    " may share the gateway's CPU; unset both for embedded, pinned ones)"
                )
                if pin
                else "no CPU pinning"
            )
        )
        plain = {"content-type": "application/json"}
        with server_process(
            uvicorn_command("gateway_stub:stub_app", stub_port, BENCH_DIR), cpus=other_cpus
        ) as stub:
            wait_http(f"{stub_url}/", stub)
            results["direct"] = uvloop.run(
                measure_target(
                    "direct", f"{stub_url}/v1/chat/completions", plain, stub.pid, bodies, args
                )
            )
            port = next_port()
            with server_process(
                uvicorn_command("controlplane.asgi:application", port, REPO), cpus=server_cpus
            ) as gateway:
                wait_http(f"http://127.0.0.1:{port}/v1/models", gateway)
                queued = _usage_queue_length()
                results["gateway"] = uvloop.run(
                    measure_target(
                        "gateway",
                        f"http://127.0.0.1:{port}/v1/chat/completions",
                        {**plain, "authorization": f"Bearer {key}"},
                        gateway.pid,
                        bodies,
                        args,
                    )
                )
                metered = _usage_queue_length() - queued
            litellm = Path(args.litellm) / "bin" / "litellm"
            if litellm.exists():
                port = next_port()
                command = [
                    str(litellm),
                    "--config",
                    str(_litellm_config(stub_url)),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--num_workers",
                    "1",
                ]
                with server_process(
                    command, cpus=server_cpus, env={"LITELLM_LOG": "ERROR"}
                ) as proc:
                    wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, timeout=180)
                    results["litellm"] = uvloop.run(
                        measure_target(
                            "litellm",
                            f"http://127.0.0.1:{port}/v1/chat/completions",
                            {**plain, "authorization": f"Bearer {LITELLM_KEY}"},
                            proc.pid,
                            bodies,
                            args,
                        )
                    )
            else:
                print(f"LiteLLM not found at {litellm}: pip install 'litellm[proxy]' there")
            router = Path(args.router) / "bin" / "vllm-router"
            if router.exists():
                port = next_port()
                command = [
                    str(router),
                    "--worker-urls",
                    stub_url,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--prometheus-port",
                    str(next_port()),
                ]
                with server_process(command, cpus=server_cpus) as proc:
                    wait_http(f"http://127.0.0.1:{port}/v1/models", proc, timeout=60)
                    results["router"] = uvloop.run(
                        measure_target(
                            "router",
                            f"http://127.0.0.1:{port}/v1/chat/completions",
                            plain,
                            proc.pid,
                            bodies,
                            args,
                        )
                    )
            else:
                print(f"vllm-router not found at {router}: pip install vllm-router there")
    return _report(args, results, metered)


def _usage_queue_length() -> int:
    from billing.services.usage import queue_key
    from controlplane.ops import redis_client

    return int(redis_client().llen(queue_key()))


def _report(args, results: dict[str, dict], metered: int) -> int:
    def cell(name: str, c: int, mode: str = "plain") -> Run | None:
        return results.get(name, {}).get((c, mode))

    print(
        f"{'server':8} {'mode':6} {'conc':>4} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'cpu ms':>7} {'errors':>6}"
    )
    for name, cells in results.items():
        for (c, mode), run in cells.items():
            print(
                f"{name:8} {mode:6} {c:4} {run.throughput:8.0f} {run.p(50):7.2f} "
                f"{run.p(99):7.2f} {run.server_cpu_ms:7.3f} {run.errors:6}"
            )
    top = max(args.concurrency)
    figures: dict[str, str] = {}
    for mode in ("plain", "stream"):
        suffix = "" if mode == "plain" else "_stream"
        gw1, d1 = cell("gateway", 1, mode), cell("direct", 1, mode)
        gw, lt, rt = (
            cell("gateway", top, mode),
            cell("litellm", top, mode),
            cell("router", top, mode),
        )
        if gw1 and d1:
            figures[f"added_p50_ms_c1{suffix}"] = f"{gw1.p(50) - d1.p(50):.2f}"
        if gw and lt:
            figures[f"litellm_rps_ratio_c{top}{suffix}"] = f"{gw.throughput / lt.throughput:.2f}"
        if gw and rt:
            figures[f"router_rps_ratio_c{top}{suffix}"] = f"{gw.throughput / rt.throughput:.2f}"
        if gw:
            figures[f"gateway_rps_c{top}{suffix}"] = f"{gw.throughput:.0f}"
            figures[f"gateway_cpu_ms_c{top}{suffix}"] = f"{gw.server_cpu_ms:.3f}"
        if lt and cell("litellm", 1, mode) and d1:
            figures[f"litellm_added_p50_ms_c1{suffix}"] = (
                f"{cell('litellm', 1, mode).p(50) - d1.p(50):.2f}"
            )
        d = cell("direct", top, mode)
        if d:
            figures[f"direct_rps_c{top}{suffix}"] = f"{d.throughput:.0f}"
    errors = sum(run.errors for cells in results.values() for run in cells.values())
    print(
        f"usage records queued by the gateway: {metered}; cores: {os.cpu_count()} "
        "(two gateway processes need more cores than this machine's load generator leaves: "
        "not measured)"
        if (os.cpu_count() or 1) < 4
        else f"cores: {os.cpu_count()}"
    )
    print(
        "RESULT "
        + " ".join(f"{k}={v}" for k, v in figures.items())
        + f" budget=on ratelimit=on metering=on errors={errors} cores={os.cpu_count()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
