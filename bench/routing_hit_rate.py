"""Routing hit rate: prefix-aware routing against round-robin, session affinity and an oracle.

A seeded synthetic multi-tenant trace: each tenant has a system prompt and documents;
tenants and documents are drawn by Zipf popularity; each session asks a few questions
about one document, its history growing turn by turn (cache-aware order: system prompt,
document, then the volatile history). Every request carries its tenant's ``cache_salt``.
Sessions are replayed ``--concurrency`` at a time (a session's next turn is sent when the
previous answer arrived), each request with ``max_tokens=1``, against fresh reference
workers (``workers.engine.launcher.serve``, in-process, small KV pools so eviction matters)
for each policy:

- ``round_robin``: the next worker in turn;
- ``session``: rendezvous hashing of the session id (``workers.routing.rendezvous_order``);
- ``prefix``: the gateway's own logic, the functions ``gateway.app`` calls on its vLLM path:
  ``prompt_text`` → ``prefix_chain`` (salted) → ``PrefixIndex.longest`` →
  ``order_candidates`` with live in-flight counts (and KV usage refreshed every
  ``directory.REFRESH_SECONDS``), ``PrefixIndex.record`` after each answer;
- ``oracle``: one worker per tenant whose pool never evicts (the hit rate an unlimited
  per-tenant cache would give this trace: only first sights of a prefix miss).

Reported per policy: token hit rate (sum of ``cached_tokens`` over sum of
``prompt_tokens``, from the workers' usage), TTFT p50 (full latency at ``max_tokens=1``),
and load balance (busiest worker's request count over the mean). Baseline: round-robin,
in the same process. Targets reported against: prefix hit rate >= 0.9 x oracle, busiest
<= 1.25 x mean, prefix miss rate <= half of round-robin's.

    .venv/bin/python bench/routing_hit_rate.py [--sessions 160] [--seed 7]

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# Run as a script from anywhere: make the repository root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# torch warns at import when NumPy is absent; nothing here uses NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import httpx  # noqa: E402
import torch  # noqa: E402

from gateway.directory import REFRESH_SECONDS, WorkerView  # noqa: E402
from gateway.requests import prompt_text  # noqa: E402
from gateway.routing import PrefixIndex, order_candidates, prefix_chain  # noqa: E402
from workers.engine.config import CacheConfig, EngineConfig, ModelConfig  # noqa: E402
from workers.engine.launcher import RunningWorker, serve  # noqa: E402
from workers.routing import rendezvous_order  # noqa: E402

MODEL = "bench/ref-tiny"
# The tiny test shape (2 layers, 2 KV heads x 16, fp32: 512 bytes a token) with room for
# long multi-turn prompts; the byte-level tokenizer makes one ASCII character one token.
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
ORACLE_POOL_TOKENS = 256 * 1024  # far above any tenant's working set: never evicts
POLICIES = ("round_robin", "session", "prefix", "oracle")
TARGET_ORACLE_SHARE = 0.9
TARGET_BALANCE = 1.25
TARGET_MISS_SHARE = 0.5
WORDS = (
    "account invoice refund policy shipment warranty contract clause liability payment "
    "customer order return damaged replacement delivery schedule support ticket escalate "
    "priority region compliance audit record retention notice termination renewal price "
    "discount credit balance statement dispute resolve agent manager review approve"
).split()


# --- the trace ---


@dataclass
class Session:
    id: str
    tenant: int
    document: int
    questions: list[str]
    answers: list[str]


@dataclass
class Trace:
    salts: list[str]
    system_prompts: list[str]
    documents: list[list[str]]
    sessions: list[Session]

    def messages(self, session: Session, turn: int) -> list[dict[str, str]]:
        """Turn ``turn`` of ``session``: fixed prefix, then the history, then the question."""
        system = (
            f"{self.system_prompts[session.tenant]}\n\n"
            f"{self.documents[session.tenant][session.document]}"
        )
        messages = [{"role": "system", "content": system}]
        for past in range(turn):
            messages.append({"role": "user", "content": session.questions[past]})
            messages.append({"role": "assistant", "content": session.answers[past]})
        messages.append({"role": "user", "content": session.questions[turn]})
        return messages

    @property
    def requests(self) -> int:
        return sum(len(s.questions) for s in self.sessions)


def _text(rng: random.Random, chars: int, head: str) -> str:
    words = [head]
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:chars]


def _zipf(n: int, s: float) -> list[float]:
    return [1 / (k + 1) ** s for k in range(n)]


def build_trace(args: argparse.Namespace) -> Trace:
    rng = random.Random(args.seed)
    tenants = range(args.tenants)
    system_prompts = [
        _text(rng, args.system_chars, f"You are the assistant of tenant {t}.") for t in tenants
    ]
    documents = [
        [_text(rng, args.document_chars, f"[document {t}-{d}]") for d in range(args.documents)]
        for t in tenants
    ]
    tenant_weights = _zipf(args.tenants, args.zipf)
    document_weights = _zipf(args.documents, args.zipf)
    sessions = []
    for n in range(args.sessions):
        tenant = rng.choices(tenants, tenant_weights)[0]
        document = rng.choices(range(args.documents), document_weights)[0]
        turns = rng.randint(1, args.max_turns)
        questions = [_text(rng, rng.randint(60, 120), f"Q{n}.{k}:") for k in range(turns)]
        answers = [_text(rng, rng.randint(120, 240), f"A{n}.{k}:") for k in range(turns)]
        sessions.append(Session(f"s{n}", tenant, document, questions, answers))
    salts = [f"bench-salt-tenant-{t}" for t in tenants]
    return Trace(salts, system_prompts, documents, sessions)


# --- policies ---


class Policy:
    """Chooses a worker for a request; told when the answer came back."""

    name = ""

    def choose(
        self,
        trace: Trace,
        session: Session,
        messages: list,
        views: list[WorkerView],
        inflight: dict[str, int],
    ) -> tuple[WorkerView, object]:
        raise NotImplementedError

    def answered(self, token: object, worker: WorkerView) -> None:
        return None


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self) -> None:
        self.turn = 0

    def choose(self, trace, session, messages, views, inflight):
        self.turn += 1
        return views[self.turn % len(views)], None


class SessionAffinity(Policy):
    name = "session"

    def choose(self, trace, session, messages, views, inflight):
        return rendezvous_order(session.id, views)[0], None


class PrefixAware(Policy):
    """What ``gateway.app._vllm`` does for a request without a cache or a session header."""

    name = "prefix"

    def __init__(self) -> None:
        self.index = PrefixIndex()
        self.decisions: Counter = Counter()  # to a holder / spilled off holders / new prefix

    def choose(self, trace, session, messages, views, inflight):
        salt = trace.salts[session.tenant]
        text = prompt_text({"messages": messages}, "chat")
        chain = prefix_chain(text, salt=salt, block_size=views[0].block_size)
        preferred, _depth = self.index.holders(chain)
        key = chain[0] if chain else f"{session.tenant}:{text[:256]}"
        worker = order_candidates(key=key, workers=views, inflight=inflight, preferred=preferred)[0]
        self.decisions[
            "holder" if worker.name in preferred else "spilled" if preferred else "new"
        ] += 1
        return worker, chain

    def answered(self, token, worker):
        if token:
            self.index.record(token, worker.name)


class Oracle(Policy):
    """Worker ``t`` holds tenant ``t`` alone, in a pool that never evicts."""

    name = "oracle"

    def choose(self, trace, session, messages, views, inflight):
        return views[session.tenant], None


# --- replay ---


@dataclass
class Outcome:
    policy: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    latencies: list[float] = field(default_factory=list)
    per_worker: Counter = field(default_factory=Counter)
    errors: int = 0
    elapsed: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def balance(self) -> float:
        counts = list(self.per_worker.values())
        return max(counts) / statistics.mean(counts) if counts else 0.0

    def ttft_ms(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1e3


async def _refresh_usage(running: list[RunningWorker], views: list[WorkerView]) -> None:
    """KV usage as the gateway's directory sees it: re-read every REFRESH_SECONDS."""
    while True:
        await asyncio.sleep(REFRESH_SECONDS)
        for i, worker in enumerate(running):
            usage = (await asyncio.to_thread(worker.engine.snapshot))["usage"]
            old = views[i]
            views[i] = WorkerView(
                old.name, old.base_url, old.model, old.pool, old.block_size, float(usage)
            )


async def replay(
    trace: Trace, policy: Policy, running: list[RunningWorker], concurrency: int
) -> Outcome:
    views = [
        WorkerView(
            name=f"w{i}",
            base_url=w.base_url,
            model=MODEL,
            pool="bench",
            block_size=BLOCK_SIZE,
            kv_usage=0.0,
        )
        for i, w in enumerate(running)
    ]
    inflight = {v.name: 0 for v in views}
    outcome = Outcome(policy.name, per_worker=Counter({v.name: 0 for v in views}))
    queue = iter(trace.sessions)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)

    async def lane(client: httpx.AsyncClient) -> None:
        for session in queue:
            for turn in range(len(session.questions)):
                messages = trace.messages(session, turn)
                worker, token = policy.choose(trace, session, messages, views, inflight)
                body = {
                    "model": MODEL,
                    "messages": messages,
                    "max_tokens": 1,
                    "temperature": 0,
                    "cache_salt": trace.salts[session.tenant],
                }
                inflight[worker.name] += 1
                started = time.perf_counter()
                try:
                    response = await client.post(
                        f"{worker.base_url}/v1/chat/completions", json=body
                    )
                finally:
                    inflight[worker.name] -= 1
                elapsed = time.perf_counter() - started
                if response.status_code != 200:
                    outcome.errors += 1
                    if outcome.errors == 1:
                        print(f"  first error: {response.status_code} {response.text[:300]}")
                    continue
                usage = response.json()["usage"]
                outcome.prompt_tokens += usage["prompt_tokens"]
                outcome.cached_tokens += (usage.get("prompt_tokens_details") or {}).get(
                    "cached_tokens", 0
                )
                outcome.latencies.append(elapsed)
                outcome.per_worker[worker.name] += 1
                policy.answered(token, worker)

    refresher = asyncio.create_task(_refresh_usage(running, views))
    started = time.perf_counter()
    try:
        async with httpx.AsyncClient(limits=limits, timeout=120) as client:
            await asyncio.gather(*(lane(client) for _ in range(concurrency)))
    finally:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher
    outcome.elapsed = time.perf_counter() - started
    return outcome


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
    )


def run_policy(trace: Trace, policy: Policy, args: argparse.Namespace) -> Outcome:
    workers, pool = (
        (args.tenants, ORACLE_POOL_TOKENS)
        if policy.name == "oracle"
        else (args.workers, args.pool_tokens)
    )
    with contextlib.ExitStack() as stack:
        running = [stack.enter_context(serve(_config(pool))) for _ in range(workers)]
        return asyncio.run(replay(trace, policy, running, args.concurrency))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tenants", type=int, default=6)
    parser.add_argument("--documents", type=int, default=6, help="per tenant")
    parser.add_argument("--sessions", type=int, default=160)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--zipf", type=float, default=1.0, help="exponent over tenants, docs")
    parser.add_argument("--system-chars", type=int, default=400)
    parser.add_argument("--document-chars", type=int, default=1200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pool-tokens", type=int, default=12_288, help="KV pool per worker")
    parser.add_argument("--concurrency", type=int, default=8, help="sessions in flight")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    trace = build_trace(args)
    static = args.tenants * (args.system_chars + args.documents * args.document_chars)
    print(
        f"trace: seed {args.seed}, {args.tenants} tenants x {args.documents} documents "
        f"(Zipf s={args.zipf}), {args.sessions} sessions of 1-{args.max_turns} turns = "
        f"{trace.requests} requests, {args.concurrency} sessions in flight, max_tokens=1; "
        f"static prefixes {static:,} tokens in all"
    )
    print(
        f"workers: {args.workers} reference workers (in-process), {args.pool_tokens:,}-token "
        f"KV pool each ({args.pool_tokens * args.workers:,} in all), block {BLOCK_SIZE}; model "
        f"{SHAPE.num_layers} layers, hidden {SHAPE.hidden_size}, fp32; oracle: {args.tenants} "
        f"workers of {ORACLE_POOL_TOKENS:,} tokens; {os.cpu_count()} cores, torch "
        f"{args.threads} thread(s); load average {os.getloadavg()[0]:.2f}"
    )
    makers = {
        "round_robin": RoundRobin,
        "session": SessionAffinity,
        "prefix": PrefixAware,
        "oracle": Oracle,
    }
    outcomes: dict[str, Outcome] = {}
    print(
        f"{'policy':12} {'hit rate':>8} {'miss':>6} {'TTFT p50':>9} {'p90':>8} "
        f"{'busiest/mean':>12} {'per worker':>24} {'errors':>6} {'wall':>6}"
    )
    notes = []
    for name in args.policies.split(","):
        policy = makers[name]()
        outcome = run_policy(trace, policy, args)
        if isinstance(policy, PrefixAware):
            d = policy.decisions
            notes.append(
                f"prefix-aware decisions: {d['holder']} to a holder of the longest "
                f"remembered prefix, {d['spilled']} spilled off busy holders, "
                f"{d['new']} new prefixes"
            )
        outcomes[name] = outcome
        spread = "/".join(str(outcome.per_worker[k]) for k in sorted(outcome.per_worker))
        print(
            f"{name:12} {outcome.hit_rate:8.3f} {1 - outcome.hit_rate:6.3f} "
            f"{outcome.ttft_ms(50):7.1f}ms {outcome.ttft_ms(90):6.1f}ms "
            f"{outcome.balance:12.2f} {spread:>24} {outcome.errors:6} "
            f"{outcome.elapsed:5.1f}s"
        )
    for note in notes:
        print(note)
    return _report(outcomes, trace)


def _report(outcomes: dict[str, Outcome], trace: Trace) -> int:
    rr, prefix = outcomes.get("round_robin"), outcomes.get("prefix")
    oracle = outcomes.get("oracle")
    if not (rr and prefix and oracle):
        return 0
    vs_oracle = prefix.hit_rate / oracle.hit_rate
    miss_vs_rr = (1 - prefix.hit_rate) / (1 - rr.hit_rate)
    speedup = rr.ttft_ms(50) / prefix.ttft_ms(50)
    met = {
        "oracle": vs_oracle >= TARGET_ORACLE_SHARE,
        "balance": prefix.balance <= TARGET_BALANCE,
        "miss": miss_vs_rr <= TARGET_MISS_SHARE,
    }

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(
        f"prefix-aware hit rate = {vs_oracle:.2f} x oracle (target >= {TARGET_ORACLE_SHARE}: "
        f"{verdict(met['oracle'])}); busiest = {prefix.balance:.2f} x mean (target <= "
        f"{TARGET_BALANCE}: {verdict(met['balance'])}); miss rate = {miss_vs_rr:.2f} x "
        f"round-robin's (target <= {TARGET_MISS_SHARE}: {verdict(met['miss'])})"
    )
    print(
        f"TTFT p50: prefix-aware {prefix.ttft_ms(50):.1f} ms vs round-robin "
        f"{rr.ttft_ms(50):.1f} ms ({speedup:.2f}x)"
    )
    fields = [f"requests={trace.requests}"]
    for name, outcome in outcomes.items():
        fields += [
            f"{name}_hit={outcome.hit_rate:.3f}",
            f"{name}_ttft_p50_ms={outcome.ttft_ms(50):.1f}",
            f"{name}_busiest_over_mean={outcome.balance:.2f}",
        ]
    fields += [
        f"prefix_vs_oracle={vs_oracle:.2f}",
        f"prefix_miss_vs_rr={miss_vs_rr:.2f}",
        f"ttft_speedup_vs_rr={speedup:.2f}",
        f"errors={sum(o.errors for o in outcomes.values())}",
        *(f"target_{k}_met={v}" for k, v in met.items()),
    ]
    print("RESULT " + " ".join(fields))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
