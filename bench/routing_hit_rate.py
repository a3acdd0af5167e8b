"""Routing hit rate at fleet scale: event-exact vs approximate routing through real gateways.

The trace (seeded, built here, see :func:`build_trace`): tenants drawn by Zipf popularity,
documents per tenant by Zipf; five request shapes:

- support **sessions**: system prompt + one document, multi-turn (history grows);
- **RAG**: system prompt + 2-3 retrieved chunks sorted by document id, then the question;
- **agents**: system prompt + sorted tool definitions, a tool-call history that grows;
- off-peak **batch jobs**: one document reviewed by many questions sent at once;
- a **burst** phase with twice the sessions in flight.

Tenants 0 and 1 have byte-identical system prompts (their salts differ, so they must not
share blocks: a router that ignores the salt predicts phantom hits); tenant 2 puts a
timestamp at the start of its system prompt (nothing after it can hit). Every request has
``max_tokens=1``. Block pools are small enough that eviction matters (``--pool-tokens``).

Policies (fresh reference workers for each, in this process; KV events on ZMQ):

- ``round_robin`` and ``session`` (rendezvous on the session id): sent straight to workers;
- ``approx``: through a real gateway process (``controlplane.asgi`` under uvicorn,
  ``CACHEPLANE_ROUTING_INDEX=approximate``): the character-based prefix index;
- ``exact``: through a real gateway process, the KV indexer (``python -m
  workers.kv_indexer``, its own process as deployed) feeding Redis: event-exact routing;
- ``exact_x4``: four gateway processes sharing Redis, requests spread over them in turn;
  ``exact`` and ``exact_x4`` run again on the traces of ``--replica-seeds`` (default
  12, 13), and ``replicas4_vs_1`` is pooled over all seeds (each seed's ratio printed);
- ``vr_cache_aware`` / ``vr_kv_aware``: vllm-router (PyPI ``vllm-router``; pass
  ``--vllm-router PATH``), its ``kv_aware`` fed the same ZMQ streams and the workers'
  ``/v1/chat/completions/render``;
- ``oracle``: one worker per tenant with a pool that never evicts.

Reported: token hit rate (sum of ``cached_tokens`` over ``prompt_tokens``), TTFT p50 (full
latency at ``max_tokens=1``), busiest worker's requests over the mean; the gateways'
routing decisions by mode; then the hot-path cost of one exact lookup (tokenize, hash,
one Redis script), wall and CPU time, measured in this process.

    .venv/bin/python bench/routing_hit_rate.py [--quick] [--vllm-router /path/to/vllm-router]
        [--replica-seeds 12,13] [--port-base 18700]

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import httpx  # noqa: E402
import torch  # noqa: E402

from workers.engine.config import CacheConfig, EngineConfig, ModelConfig  # noqa: E402
from workers.engine.kv_events import KVEventsConfig  # noqa: E402
from workers.engine.launcher import RunningWorker, serve  # noqa: E402
from workers.routing import rendezvous_order  # noqa: E402

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
PORT_BASE = 18700  # gateways at base+1.., vllm-router at base+20 (--port-base)
TARGET_EXACT = 0.95
TARGET_BALANCE = 1.25
TARGET_REPLICAS = 0.02
WORDS = (
    "account invoice refund policy shipment warranty contract clause liability payment "
    "customer order return damaged replacement delivery schedule support ticket escalate "
    "priority region compliance audit record retention notice termination renewal price "
    "discount credit balance statement dispute resolve agent manager review approve"
).split()
TOOLS = ("search_orders", "refund", "lookup_customer", "create_ticket", "escalate", "shipping")


# --- the trace ----------------------------------------------------------------------------


@dataclass
class Request:
    tenant: int
    session: str
    messages: list[dict[str, str]]


@dataclass
class Episode:
    """Steps run in order; the requests of one step are sent at once (a batch job's fan-out)."""

    kind: str
    steps: list[list[Request]]


@dataclass
class Trace:
    tenants: int
    phases: list[tuple[str, int, list[Episode]]]  # (name, sessions in flight, episodes)

    @property
    def requests(self) -> int:
        return sum(len(s) for _, _, eps in self.phases for e in eps for s in e.steps)


def _text(rng: random.Random, chars: int, head: str) -> str:
    words = [head]
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:chars]


def _zipf_pick(rng: random.Random, n: int, s: float) -> int:
    return rng.choices(range(n), [1 / (k + 1) ** s for k in range(n)])[0]


def build_trace(args: argparse.Namespace) -> Trace:
    rng = random.Random(args.seed)
    n = args.tenants
    systems = [
        _text(rng, rng.randint(300, 600), f"You are the assistant of tenant {t}.") for t in range(n)
    ]
    systems[1] = systems[0]  # byte-identical system prompts, different salts
    docs = [
        [_text(rng, rng.randint(700, 1400), f"[doc {t}-{d}]") for d in range(args.documents)]
        for t in range(n)
    ]
    tools = [
        "\n".join(f"tool {name}: {_text(rng, 120, name)}" for name in sorted(TOOLS))
        for _ in range(n)
    ]
    clock = [0]

    def system_for(t: int) -> str:
        if t == 2:  # the volatile tenant: a timestamp first, so nothing after it is reusable
            clock[0] += 1
            stamp = f"09:{clock[0] // 60 % 60:02d}:{clock[0] % 60:02d}"
            return f"Current time: 2026-12-01T{stamp}Z\n{systems[t]}"
        return systems[t]

    counter = Counter()

    def sid(kind: str) -> str:
        counter[kind] += 1
        return f"{kind}{counter[kind]}"

    def session(t: int) -> Episode:
        d = _zipf_pick(rng, args.documents, args.zipf)
        s, history, steps = sid("s"), [], []
        for k in range(rng.randint(1, args.max_turns)):
            q = _text(rng, rng.randint(60, 120), f"Q{s}.{k}:")
            msgs = [{"role": "system", "content": f"{system_for(t)}\n\n{docs[t][d]}"}, *history]
            steps.append([Request(t, s, [*msgs, {"role": "user", "content": q}])])
            history += [
                {"role": "user", "content": q},
                {"role": "assistant", "content": _text(rng, rng.randint(100, 200), f"A{s}.{k}:")},
            ]
        return Episode("session", steps)

    def rag(t: int) -> Episode:
        s = sid("r")
        chunks = sorted(
            {_zipf_pick(rng, args.documents, args.zipf) for _ in range(rng.randint(2, 3))}
        )
        context = "\n".join(docs[t][c][:500] for c in chunks)
        q = _text(rng, 90, f"RAG {s}:")
        msgs = [{"role": "system", "content": f"{system_for(t)}\n\nContext:\n{context}"}]
        return Episode("rag", [[Request(t, s, [*msgs, {"role": "user", "content": q}])]])

    def agent(t: int) -> Episode:
        s, steps = sid("a"), []
        msgs = [
            {"role": "system", "content": f"{system_for(t)}\n\nTools:\n{tools[t]}"},
            {"role": "user", "content": _text(rng, 100, f"Task {s}:")},
        ]
        for k in range(rng.randint(2, args.max_turns)):
            steps.append([Request(t, s, list(msgs))])
            call = rng.choice(TOOLS)
            msgs += [
                {"role": "assistant", "content": f"call {call}({k})"},
                {"role": "user", "content": _text(rng, rng.randint(150, 300), f"result {k}:")},
            ]
        return Episode("agent", steps)

    def batch(t: int) -> Episode:
        d = _zipf_pick(rng, args.documents, args.zipf)
        s = sid("b")
        fan = [
            Request(
                t,
                f"{s}.{i}",
                [
                    {"role": "system", "content": f"{system_for(t)}\n\n{docs[t][d]}"},
                    {"role": "user", "content": _text(rng, 80, f"Review {s}.{i}:")},
                ],
            )
            for i in range(args.batch_size)
        ]
        return Episode("batch", [fan])

    def interactive(count: int) -> list[Episode]:
        out = []
        for _ in range(count):
            t = _zipf_pick(rng, n, args.zipf)
            shape = rng.choices((session, rag, agent), (0.5, 0.25, 0.25))[0]
            out.append(shape(t))
        return out

    e = args.episodes
    phases = [
        ("peak", args.concurrency, interactive(e // 2)),
        ("burst", args.concurrency * 2, interactive(e // 4)),
        (
            "off-peak",
            max(2, args.concurrency // 2),
            [batch(_zipf_pick(rng, n, args.zipf)) for _ in range(max(2, e // 16))]
            + interactive(e // 8),
        ),
    ]
    return Trace(n, phases)


# --- senders (one per policy) -------------------------------------------------------------


class Sender:
    """Where a request goes: straight to a worker, or to a router/gateway URL."""

    def target(self, request: Request) -> tuple[str, dict[str, str], str | None]:
        """``(url, headers, worker-name-or-None)``; None: the router chooses."""
        raise NotImplementedError


class Direct(Sender):
    def __init__(self, workers: list[RunningWorker], choose) -> None:
        self.urls = [w.base_url for w in workers]
        self.choose = choose

    def target(self, request):
        i = self.choose(request)
        return f"{self.urls[i]}/v1/chat/completions", {}, self.urls[i]


class ThroughRouter(Sender):
    def __init__(self, urls: list[str], keys: dict[int, str] | None) -> None:
        self.urls, self.keys, self.turn = urls, keys, 0

    def target(self, request):
        self.turn += 1
        headers = {"Authorization": f"Bearer {self.keys[request.tenant]}"} if self.keys else {}
        return f"{self.urls[self.turn % len(self.urls)]}/v1/chat/completions", headers, None


@dataclass
class Outcome:
    policy: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    latencies: list[float] = field(default_factory=list)
    per_worker: Counter = field(default_factory=Counter)
    errors: int = 0
    elapsed: float = 0.0
    modes: Counter = field(default_factory=Counter)

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def balance(self) -> float:
        counts = list(self.per_worker.values())
        return max(counts) / statistics.mean(counts) if counts and any(counts) else 0.0

    def ttft_ms(self, q: float = 50) -> float:
        ordered = sorted(self.latencies) or [0.0]
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1e3


async def replay(
    trace: Trace, sender: Sender, workers: list[RunningWorker], salts, policy: str
) -> Outcome:
    outcome = Outcome(policy)
    # Idle connections go after 2 s, before the workers' own 5 s keep-alive timeout: a
    # baseline sent straight to workers would otherwise lose a request now and then to a
    # connection the worker closes just as it is reused (the gateway retries that case).
    limits = httpx.Limits(max_connections=128, max_keepalive_connections=128, keepalive_expiry=2.0)

    async def one(client: httpx.AsyncClient, request: Request) -> None:
        url, headers, worker = sender.target(request)
        body = {"model": MODEL, "messages": request.messages, "max_tokens": 1, "temperature": 0}
        if not headers:  # straight to a worker or vllm-router: the salt is ours to set
            body["cache_salt"] = salts[request.tenant]
        started = time.perf_counter()
        try:
            response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            outcome.errors += 1
            if outcome.errors == 1:
                print(f"  first error: {exc!r}")
            return
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            outcome.errors += 1
            if outcome.errors == 1:
                print(f"  first error: {response.status_code} {response.text[:300]}")
            return
        usage = response.json()["usage"]
        outcome.prompt_tokens += usage["prompt_tokens"]
        outcome.cached_tokens += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        outcome.latencies.append(elapsed)

    started = time.perf_counter()
    async with httpx.AsyncClient(limits=limits, timeout=180) as client:
        for _name, lanes, episodes in trace.phases:
            queue = iter(episodes)

            async def lane(queue=queue) -> None:
                for episode in queue:
                    for step in episode.steps:
                        await asyncio.gather(*(one(client, r) for r in step))

            await asyncio.gather(*(lane() for _ in range(lanes)))
    outcome.elapsed = time.perf_counter() - started
    # Fresh workers per policy: each one's own request counter is this run's share.
    outcome.per_worker = Counter({f"w{i}": _served(w) for i, w in enumerate(workers)})
    return outcome


def _served(worker: RunningWorker) -> int:
    from prometheus_client.parser import text_string_to_metric_families

    text = worker.engine.metrics.render().decode()
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "vllm:request_success_total"
        )
    )


# --- the fleet ----------------------------------------------------------------------------


def _config(pool_tokens: int) -> EngineConfig:
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
            endpoint="tcp://127.0.0.1:*",
            replay_endpoint="tcp://127.0.0.1:*",
        ),
    )


def _wait_http(url: str, process: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise SystemExit(f"{process.args[:4]} exited with {process.returncode} at start")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer within {timeout:.0f} s") from None
            time.sleep(0.2)


@contextlib.contextmanager
def _process(command: list[str], url: str, env: dict[str, str] | None = None):
    process = subprocess.Popen(
        command, cwd=REPO, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL
    )
    try:
        _wait_http(url, process)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _gateway(port: int, index: str):
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
    return _process(command, f"http://127.0.0.1:{port}/v1/models", env)


def _create_tenants(count: int) -> dict[int, str]:
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


def _register(workers: list[RunningWorker]) -> None:
    from tenants.actor import Actor
    from workers.services import worker_register

    for i, w in enumerate(workers):
        worker_register(
            actor=Actor.cli(),
            name=f"w{i}",
            base_url=w.base_url,
            model=MODEL,
            kv_events_endpoint=f"{w.kv_events_endpoint},{w.kv_events_replay_endpoint}",
        )


def _reset_redis() -> None:
    from controlplane.ops import redis_client

    client = redis_client()
    for pattern in ("cp:kv:*", "cp:load:*"):
        for key in client.scan_iter(pattern):
            client.delete(key)


async def _lookup_cost(
    trace: Trace, workers: list[tuple[str, str]], samples: int
) -> dict[str, list[float]]:
    """Seconds per ``route_request`` in exact mode (tokenize, hash, one Redis script):
    wall time and this thread's CPU time, for every sampled request and for those whose
    prompt the index already held (a known prefix: nothing to claim)."""
    from gateway.directory import WorkerView
    from gateway.routing import PrefixIndex, route_request

    views = [WorkerView(name, url, MODEL, "default", BLOCK_SIZE, 0.0) for name, url in workers]
    requests = [r for _, _, eps in trace.phases for e in eps for s in e.steps for r in s]
    costs: dict[str, list[float]] = {"wall": [], "cpu": [], "known_cpu": [], "known_wall": []}
    modes = Counter()
    approx = PrefixIndex()
    for r in requests[:samples]:
        body = {"model": MODEL, "messages": r.messages}
        started, cpu = time.perf_counter(), time.thread_time()
        decision = await route_request(
            body=body,
            kind="chat",
            text="".join(m["content"] for m in r.messages),
            workers=views,
            salt=f"salt-{r.tenant}",
            tenant_id=str(r.tenant),
            session=None,
            inflight={},
            approx_index=approx,
            replica="bench",
        )
        wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
        costs["wall"].append(wall)
        costs["cpu"].append(cpu)
        if decision.routed_tokens and decision.routed_tokens == decision.available_tokens:
            costs["known_wall"].append(wall)
            costs["known_cpu"].append(cpu)
        modes[decision.mode] += 1
    print(f"  lookup modes: {dict(modes)}; known prefixes: {len(costs['known_cpu'])}")
    return costs


@contextlib.contextmanager
def _indexer(workers: list[RunningWorker]):
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


def _route_modes(ports: list[int]) -> Counter:
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


def run_policy(
    name: str, trace: Trace, args, keys: dict[int, str], salts
) -> tuple[Outcome, dict[str, list[float]]]:

    oracle = name == "oracle"
    count, pool = (
        (trace.tenants, ORACLE_POOL_TOKENS) if oracle else (args.workers, args.pool_tokens)
    )
    costs: dict[str, list[float]] = {}
    _reset_redis()
    with contextlib.ExitStack() as stack:
        workers = [stack.enter_context(serve(_config(pool))) for _ in range(count)]
        if name == "round_robin":
            turn = iter(range(10**9))
            sender: Sender = Direct(workers, lambda r: next(turn) % count)
        elif name == "session":
            sender = Direct(
                workers, lambda r: rendezvous_order(r.session, list(range(count)), name=str)[0]
            )
        elif oracle:
            sender = Direct(workers, lambda r: r.tenant)
        elif name.startswith("vr_"):
            policy = name.removeprefix("vr_")
            command = [
                args.vllm_router,
                "--port",
                str(args.port_base + 20),
                "--policy",
                policy,
                "--worker-urls",
                *[w.base_url for w in workers],
                "--worker-startup-check-interval",
                "1",
                "--log-level",
                "warning",
            ]
            if policy == "kv_aware":
                command += ["--kv-event-model", MODEL, "--kv-event-block-size", str(BLOCK_SIZE)]
                for w in workers:
                    command += ["--kv-event-source", f"{w.base_url}={w.kv_events_endpoint}"]
                    command += [
                        "--kv-event-replay-source",
                        f"{w.base_url}={w.kv_events_replay_endpoint}",
                    ]
            router = f"http://127.0.0.1:{args.port_base + 20}"
            stack.enter_context(_process(command, f"{router}/health"))
            sender = ThroughRouter([router], None)
        else:
            _register(workers)
            exact = name.startswith("exact")
            if exact:
                # Its own process, as deployed (a thread here would share this process's
                # GIL with the workers and, on a loaded machine, let the index go stale).
                stack.enter_context(_indexer(workers))
            replicas = 4 if name.endswith("_x4") else 1
            ports = [args.port_base + 1 + k for k in range(replicas)]
            for port in ports:
                stack.enter_context(_gateway(port, "kv_events" if exact else "approximate"))
            time.sleep(2.5)  # the gateways' directory refresh picks up the new workers
            sender = ThroughRouter([f"http://127.0.0.1:{p}" for p in ports], keys)
        outcome = asyncio.run(replay(trace, sender, workers, salts, name))
        if name in ("approx", "exact", "exact_x4"):
            outcome.modes = _route_modes(ports)
            print(f"  {name} routing decisions by mode/reason: {dict(outcome.modes)}")
        views = [(f"w{i}", w.base_url) for i, w in enumerate(workers)]
    if name == "exact" and args.lookup_samples:
        # Measured with the in-process workers stopped (their threads would compete for
        # this process's GIL), while the index in Redis is still fresh.
        costs = asyncio.run(_lookup_cost(trace, views, args.lookup_samples))
    return outcome, costs


# --- main ---------------------------------------------------------------------------------

POLICIES = (
    "round_robin",
    "session",
    "approx",
    "exact",
    "exact_x4",
    "vr_cache_aware",
    "vr_kv_aware",
    "oracle",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--quick", action="store_true", help="a small trace (about a minute a policy)"
    )
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--documents", type=int, default=5, help="per tenant")
    parser.add_argument("--episodes", type=int, default=96)
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=6)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pool-tokens", type=int, default=24_576, help="KV pool per worker")
    parser.add_argument("--concurrency", type=int, default=6, help="episodes in flight at peak")
    parser.add_argument("--lookup-samples", type=int, default=200)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument(
        "--replica-seeds",
        default="12,13",
        help="more trace seeds on which exact and exact_x4 run again (replicas4_vs_1 is "
        "pooled over --seed and these); empty: the main seed only",
    )
    parser.add_argument("--port-base", type=int, default=PORT_BASE)
    parser.add_argument(
        "--vllm-router",
        default=shutil.which("vllm-router") or "",
        help="the vllm-router binary (pip install vllm-router); its policies are skipped without",
    )
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.tenants, args.lookup_samples = 40, 6, 100
    torch.set_num_threads(1)
    trace = build_trace(args)
    salts = [f"bench-salt-{t}" for t in range(args.tenants)]
    policies = [p for p in args.policies.split(",") if p]
    if not args.vllm_router:
        print("vllm-router not found (--vllm-router PATH): its baselines are skipped")
        policies = [p for p in policies if not p.startswith("vr_")]
    kinds = Counter(e.kind for _, _, eps in trace.phases for e in eps)
    print(
        f"trace: seed {args.seed}, {args.tenants} tenants (Zipf s={args.zipf}; tenants 0 and 1 "
        f"share a system prompt, tenant 2 is volatile) x {args.documents} documents, "
        f"{trace.requests} requests in {dict(kinds)}; phases "
        + ", ".join(f"{n} ({lanes} in flight, {len(e)} episodes)" for n, lanes, e in trace.phases)
    )
    print(
        f"fleet: {args.workers} reference workers, {args.pool_tokens:,}-token KV pool each, "
        f"block {BLOCK_SIZE}; oracle: {args.tenants} workers of {ORACLE_POOL_TOKENS:,} tokens; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}"
    )
    from bench.support import scratch_django

    outcomes: dict[str, Outcome] = {}
    costs: dict[str, list[float]] = {}
    pairs: list[tuple[int, Outcome, Outcome]] = []  # (seed, exact, exact_x4)
    with scratch_django("routing"):
        keys = _create_tenants(args.tenants)
        print(
            f"{'policy':16} {'hit rate':>8} {'TTFT p50':>9} {'busiest/mean':>12} "
            f"{'per worker':>20} {'errors':>6} {'wall':>6}"
        )
        for name in policies:
            outcome, cost = run_policy(name, trace, args, keys, salts)
            costs = costs or cost
            outcomes[name] = outcome
            _row(name, outcome)
        if "exact" in outcomes and "exact_x4" in outcomes:
            pairs.append((args.seed, outcomes["exact"], outcomes["exact_x4"]))
            seeds = [int(x) for x in args.replica_seeds.split(",") if x.strip()]
            for seed in seeds:
                other = build_trace(argparse.Namespace(**{**vars(args), "seed": seed}))
                print(f"seed {seed}: {other.requests} requests")
                one, _ = run_policy("exact", other, _no_lookup(args), keys, salts)
                _row("  exact", one)
                four, _ = run_policy("exact_x4", other, args, keys, salts)
                _row("  exact_x4", four)
                pairs.append((seed, one, four))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return _report(outcomes, costs, trace, pairs)


def _no_lookup(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "lookup_samples": 0})


def _row(name: str, outcome: Outcome) -> None:
    spread = "/".join(str(outcome.per_worker[k]) for k in sorted(outcome.per_worker))
    print(
        f"{name:16} {outcome.hit_rate:8.3f} {outcome.ttft_ms():7.1f}ms "
        f"{outcome.balance:12.2f} {spread[:20]:>20} {outcome.errors:6} "
        f"{outcome.elapsed:5.1f}s",
        flush=True,
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3 if ordered else 0.0


def _report(
    outcomes: dict[str, Outcome],
    costs: dict[str, list[float]],
    trace: Trace,
    pairs: list[tuple[int, Outcome, Outcome]],
) -> int:
    fields = [f"requests={trace.requests}"]
    for name, o in outcomes.items():
        fields += [
            f"{name}_hit={o.hit_rate:.3f}",
            f"{name}_ttft_p50_ms={o.ttft_ms():.1f}",
            f"{name}_balance={o.balance:.2f}",
        ]
    oracle = outcomes.get("oracle")

    def vs(name: str) -> float | None:
        o = outcomes.get(name)
        return o.hit_rate / oracle.hit_rate if o and oracle and oracle.hit_rate else None

    ratios = {
        "exact_vs_oracle": vs("exact"),
        "approx_vs_oracle": vs("approx"),
        "kv_aware_vs_oracle": vs("vr_kv_aware"),
        "cache_aware_vs_oracle": vs("vr_cache_aware"),
    }
    for k, v in ratios.items():
        if v is not None:
            fields.append(f"{k}={v:.3f}")
    exact = outcomes.get("exact")
    if exact:
        fields.append(f"exact_balance={exact.balance:.2f}")
    replicas = None
    if pairs:
        # Pooled over the seeds: the fleet's cached tokens over its prompt tokens, 4
        # replicas against 1 on the same traces; each seed's ratio is shown too.
        def pooled(outs: list[Outcome]) -> float:
            prompt = sum(o.prompt_tokens for o in outs)
            return sum(o.cached_tokens for o in outs) / prompt if prompt else 0.0

        one = pooled([p[1] for p in pairs])
        four = pooled([p[2] for p in pairs])
        replicas = four / one if one else None
        per_seed = [p[2].hit_rate / p[1].hit_rate if p[1].hit_rate else 0.0 for p in pairs]
        balance4 = max(p[2].balance for p in pairs)
        print(
            "4 replicas vs 1, per seed: "
            + ", ".join(
                f"seed {seed} {r:.3f} (balance {a.balance:.2f} vs {b.balance:.2f})"
                for (seed, a, b), r in zip(pairs, per_seed, strict=True)
            )
        )
        if replicas is not None:
            fields.append(f"replicas4_vs_1={replicas:.3f}")
        fields += [
            f"replicas4_vs_1_min={min(per_seed):.3f}",
            f"replicas4_seeds={len(pairs)}",
            f"exact_x4_balance_max={balance4:.2f}",
        ]
    if costs.get("cpu"):
        print(
            "exact lookup on the hot path (tokenize + hash + one Redis script): "
            f"wall p50 {_pct(costs['wall'], 0.5):.2f} ms, p99 {_pct(costs['wall'], 0.99):.2f} ms; "
            f"CPU p50 {_pct(costs['cpu'], 0.5):.3f} ms, p99 {_pct(costs['cpu'], 0.99):.3f} ms "
            f"(with its claim); known prefix CPU p50 {_pct(costs['known_cpu'], 0.5):.3f} ms "
            f"over {len(costs['known_cpu'])} lookups"
        )
        fields += [
            f"lookup_p50_ms={_pct(costs['wall'], 0.5):.2f}",
            f"lookup_p99_ms={_pct(costs['wall'], 0.99):.2f}",
            f"lookup_cpu_p50_ms={_pct(costs['cpu'], 0.5):.3f}",
            f"lookup_cpu_p99_ms={_pct(costs['cpu'], 0.99):.3f}",
            f"lookup_known_cpu_p50_ms={_pct(costs['known_cpu'], 0.5):.3f}",
        ]
    met = []
    if ratios["exact_vs_oracle"] is not None and exact:
        ok = ratios["exact_vs_oracle"] >= TARGET_EXACT and exact.balance <= TARGET_BALANCE
        met.append(f"target_exact_met={ok}")
    if replicas is not None:
        ok = replicas >= 1 - TARGET_REPLICAS and all(p[2].balance <= TARGET_BALANCE for p in pairs)
        met.append(f"target_replicas_met={ok}")
    swept = [o for _seed, a, b in pairs[1:] for o in (a, b)]  # pairs[0] is in outcomes
    fields.append(f"errors={sum(o.errors for o in [*outcomes.values(), *swept])}")
    fields.append(f"loadavg={os.getloadavg()[0]:.2f}")
    print("RESULT " + " ".join(fields + met))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
