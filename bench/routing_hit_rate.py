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

The last line is ``RESULT key=value ...``. The trace is ``bench/routing_trace.py``, the
senders and replay ``bench/routing_replay.py``, the fleet's processes ``bench/routing_fleet.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402

from bench.routing_fleet import (  # noqa: E402
    BLOCK_SIZE,
    MODEL,
    ORACLE_POOL_TOKENS,
    gateway_process,
    kv_indexer,
    redis_reset,
    route_modes,
    server_process,
    tenants_create,
    worker_config,
    workers_register,
)
from bench.routing_replay import (  # noqa: E402
    Direct,
    Outcome,
    Sender,
    ThroughRouter,
    lookup_cost,
    replay,
)
from bench.routing_trace import Trace, build_trace  # noqa: E402
from workers.engine.launcher import serve  # noqa: E402
from workers.routing import rendezvous_order  # noqa: E402

PORT_BASE = 18700  # gateways at base+1.., vllm-router at base+20 (--port-base)
TARGET_EXACT = 0.95
TARGET_BALANCE = 1.25
TARGET_REPLICAS = 0.02


def run_policy(
    name: str, trace: Trace, args, keys: dict[int, str], salts
) -> tuple[Outcome, dict[str, list[float]]]:

    oracle = name == "oracle"
    count, pool = (
        (trace.tenants, ORACLE_POOL_TOKENS) if oracle else (args.workers, args.pool_tokens)
    )
    costs: dict[str, list[float]] = {}
    redis_reset()
    with contextlib.ExitStack() as stack:
        workers = [stack.enter_context(serve(worker_config(pool))) for _ in range(count)]
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
            stack.enter_context(server_process(command, f"{router}/health"))
            sender = ThroughRouter([router], None)
        else:
            workers_register(workers)
            exact = name.startswith("exact")
            if exact:
                # Its own process, as deployed (a thread here would share this process's
                # GIL with the workers and, on a loaded machine, let the index go stale).
                stack.enter_context(kv_indexer(workers))
            replicas = 4 if name.endswith("_x4") else 1
            ports = [args.port_base + 1 + k for k in range(replicas)]
            for port in ports:
                stack.enter_context(gateway_process(port, "kv_events" if exact else "approximate"))
            time.sleep(2.5)  # the gateways' directory refresh picks up the new workers
            sender = ThroughRouter([f"http://127.0.0.1:{p}" for p in ports], keys)
        outcome = asyncio.run(replay(trace, sender, workers, salts, name))
        if name in ("approx", "exact", "exact_x4"):
            outcome.modes = route_modes(ports)
            print(f"  {name} routing decisions by mode/reason: {dict(outcome.modes)}")
        views = [(f"w{i}", w.base_url) for i, w in enumerate(workers)]
    if name == "exact" and args.lookup_samples:
        # Measured with the in-process workers stopped (their threads would compete for
        # this process's GIL), while the index in Redis is still fresh.
        costs = asyncio.run(lookup_cost(trace, views, args.lookup_samples))
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
        keys = tenants_create(args.tenants)
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
