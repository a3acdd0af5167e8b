"""Sending the trace of ``bench/routing_hit_rate.py``: straight to workers, through a router
or gateways (one ``Sender`` per policy), and the routing function itself, timed in-process.

``replay`` runs each phase's episodes in lanes (the phase's sessions in flight) and sums
``cached_tokens`` over ``prompt_tokens``; ``lookup_cost`` times ``route_request`` alone.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from bench.routing_fleet import BLOCK_SIZE, MODEL
from bench.routing_trace import Request, Trace
from workers.engine.launcher import RunningWorker


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


async def lookup_cost(
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
