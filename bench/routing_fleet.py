"""The fleet of ``bench/routing_hit_rate.py``: reference workers with KV events, gateway
processes, vllm-router, the KV indexer process, and the tenants and workers they serve.

Every server is its own process, stopped when its context ends; the workers' engine shape
is small on purpose (``SHAPE``), so pools evict at the sizes the benchmark sets.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.support import stop_process, wait_http
from workers.engine.config import CacheConfig, EngineConfig, ModelConfig
from workers.engine.kv_events import KVEventsConfig
from workers.engine.launcher import RunningWorker

REPO = Path(__file__).resolve().parent.parent
MODEL = "bench/ref-tiny"
SHAPE = ModelConfig(
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    max_position_embeddings=4096,
)
BLOCK_SIZE = 16
BYTES_PER_TOKEN = 512
MAX_MODEL_LEN = 4096
ORACLE_POOL_TOKENS = 128 * 1024


def worker_config(pool_tokens: int) -> EngineConfig:
    blocks = pool_tokens // BLOCK_SIZE + 1  # the null block included
    return EngineConfig(
        model=MODEL,
        model_config=SHAPE,
        cache_config=CacheConfig(
            block_size=BLOCK_SIZE, kv_cache_memory_bytes=blocks * BLOCK_SIZE * BYTES_PER_TOKEN
        ),
        max_model_len=MAX_MODEL_LEN,
        enable_prompt_tokens_details=True,
        kv_events=KVEventsConfig(
            enable_kv_cache_events=True,
            publisher="zmq",
            endpoint="tcp://*:*",  # vLLM binds only for a wildcard host
            replay_endpoint="tcp://*:*",
        ),
    )


@contextlib.contextmanager
def server_process(command: list[str], url: str, env: dict[str, str] | None = None):
    process = subprocess.Popen(
        command, cwd=REPO, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL
    )
    try:
        wait_http(url, process, timeout=90.0)
        yield process
    finally:
        stop_process(process)


def gateway_process(port: int, index: str):
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "controlplane.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--lifespan",
        "off",
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    env = {
        "CACHEPLANE_ROUTING_INDEX": index,
        "PYTHONWARNINGS": "ignore:No directory at:UserWarning",
        "CACHEPLANE_LOG_LEVEL": "WARNING",
    }
    return server_process(command, f"http://127.0.0.1:{port}/v1/models", env)


def tenants_create(count: int) -> dict[int, str]:
    """One tenant per trace tenant, each with a developer service account and an API key."""
    from tenants.actor import Actor
    from tenants.services import keys
    from tenants.services.iam import BindingSpec, policy_get, policy_set, service_account_create
    from tenants.services.tenants import human_principal_create, tenant_create

    admin = human_principal_create(actor=Actor.cli(), username="bench-admin", password=None)
    actor = Actor.cli(principal=admin)
    out = {}
    for t in range(count):
        tenant = tenant_create(
            actor=Actor.cli(), slug=f"bench-t{t}", display_name=f"T{t}", admin=admin
        )
        sa = service_account_create(actor=actor, tenant=tenant, name="loadgen")
        policy = policy_get(tenant=tenant)
        specs = [
            BindingSpec(role=b.role.name, principal_id=str(b.principal_id)) for b in policy.bindings
        ]
        specs.append(BindingSpec(role="tenant.developer", principal_id=str(sa.pk)))
        policy_set(actor=actor, tenant=tenant, etag=policy.etag, bindings=specs)
        out[t] = keys.api_key_create(
            actor=actor, tenant=tenant, name="loadgen", principal=sa
        ).plaintext
    return out


def wildcard(endpoint: str | None) -> str:
    """``tcp://0.0.0.0:P`` (what a wildcard bind resolves to) as registered: ``tcp://*:P``."""
    host_port = (endpoint or "").removeprefix("tcp://")
    return f"tcp://*:{host_port.rsplit(':', 1)[-1]}"


def workers_register(workers: list[RunningWorker]) -> None:
    from tenants.actor import Actor
    from workers.services import worker_register

    for i, w in enumerate(workers):
        worker_register(
            actor=Actor.cli(),
            name=f"w{i}",
            base_url=w.base_url,
            model=MODEL,
            kv_events_endpoint=(
                f"{wildcard(w.kv_events_endpoint)},{wildcard(w.kv_events_replay_endpoint)}"
            ),
        )


def redis_reset() -> None:
    from controlplane.ops import redis_client

    client = redis_client()
    for pattern in ("cp:kv:*", "cp:load:*"):
        for key in client.scan_iter(pattern):
            client.delete(key)


@contextlib.contextmanager
def kv_indexer(workers: list[RunningWorker]):
    """``python -m workers.kv_indexer`` for these workers, until every one is live."""
    import redis

    command = [sys.executable, "-m", "workers.kv_indexer", "--redis", os.environ["REDIS_URL"]]
    for i, w in enumerate(workers):
        command += ["--source", f"w{i}={w.kv_events_endpoint},{w.kv_events_replay_endpoint}"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        deadline = time.monotonic() + 60
        while client.hlen("cp:kv:live") < len(workers):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the KV indexer did not come up")
            time.sleep(0.2)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def route_modes(ports: list[int]) -> Counter:
    """``cacheplane_gateway_route_total`` summed over the gateways (their /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    modes: Counter = Counter()
    for port in ports:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        except httpx.HTTPError:
            continue
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "cacheplane_gateway_route_total":
                    modes[f"{sample.labels['mode']}/{sample.labels['reason']}"] += sample.value
    return modes
