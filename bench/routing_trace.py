"""The trace ``bench/routing_hit_rate.py`` replays, built from its arguments and seed.

Tenants drawn by Zipf popularity, documents per tenant by Zipf, five request shapes
(sessions, RAG, agents, off-peak batch jobs, a burst phase); tenants 0 and 1 share a system
prompt byte for byte, tenant 2 starts its prompt with a timestamp (see the benchmark's
docstring for what each shape tests).
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from dataclasses import dataclass

WORDS = (
    "account invoice refund policy shipment warranty contract clause liability payment "
    "customer order return damaged replacement delivery schedule support ticket escalate "
    "priority region compliance audit record retention notice termination renewal price "
    "discount credit balance statement dispute resolve agent manager review approve"
).split()
TOOLS = ("search_orders", "refund", "lookup_customer", "create_ticket", "escalate", "shipping")


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
