"""Cache-breakpoint autopilot: cache-read share on a replayed multi-turn trace, with the
autopilot placing Anthropic ``cache_control`` breakpoints vs the same trace sent as
clients write it (no breakpoints), both against the local Anthropic server
(``tests.servers.anthropic_server``: breakpoints, minimums, TTLs, 20-block lookback).

Trace (seeded): one tenant, 40 conversations of 2-8 turns sharing one of 3 system
prompts (1,500 tokens each), started over two hours, 20-400 s between turns, plus 60
one-shot questions on the same system prompts; Claude Sonnet 4.5, the price book's
rates for cost. The autopilot runs as the gateway runs it
(``gateway.adapters.autopilot.place_breakpoints``, Redis from ``REDIS_URL``) with the
trace's clock. Run: ``DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/5 python
bench/breakpoint_autopilot.py``.
"""

from __future__ import annotations

import asyncio
import copy
import os
import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402

from gateway.adapters.autopilot import place_breakpoints  # noqa: E402
from gateway.adapters.hosted import HOSTED_MODELS  # noqa: E402
from tests.servers.anthropic_server import AnthropicServer  # noqa: E402
from tests.servers.common import serving  # noqa: E402

MODEL = "claude-sonnet-4-5"
KEY = "sk-ant-bench"
# n$ a token: input, 5m write, 1h write, read, output (Sonnet 4.5)
RATES = (3000, 3750, 6000, 300, 15000)


def _trace(seed: int = 7) -> list[tuple[float, str, dict]]:
    rng = random.Random(seed)
    systems = [f"sys{i} " * 1200 for i in range(3)]  # 6,000 characters: 1,500 tokens
    events: list[tuple[float, str, dict]] = []
    for c in range(40):
        t = rng.uniform(0, 7200)
        system = systems[rng.randrange(3)]
        messages: list[dict] = []
        for turn in range(rng.randint(2, 8)):
            messages = [
                *messages,
                {"role": "user", "content": f"conv {c} turn {turn} " + "q" * rng.randint(40, 400)},
            ]
            events.append((t, system, {"messages": copy.deepcopy(messages)}))
            messages.append({"role": "assistant", "content": "tok " * 4})
            t += rng.uniform(20, 400)
    for q in range(60):
        events.append(
            (
                rng.uniform(0, 7200),
                systems[rng.randrange(3)],
                {"messages": [{"role": "user", "content": f"one-shot {q} " + "x" * 200}]},
            )
        )
    return sorted(events, key=lambda e: e[0])


async def _replay(url: str, server: AnthropicServer, autopilot: bool) -> dict[str, int]:
    tenant = str(uuid.uuid4())
    totals = {"prompt": 0, "read": 0, "write_5m": 0, "write_1h": 0, "cost": 0, "requests": 0}
    start = time.time()
    async with httpx.AsyncClient(timeout=30) as client:
        for t, system, body in _trace():
            sent = {"model": MODEL, "max_tokens": 16, "system": system, **body}
            server.clock.offset = start + t - time.time()
            if autopilot:
                await place_breakpoints(
                    tenant_id=tenant, model=HOSTED_MODELS[MODEL], body=sent, now=start + t
                )
            answer = await client.post(
                f"{url}/v1/messages",
                json=sent,
                headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
            )
            answer.raise_for_status()
            usage = answer.json()["usage"]
            split = usage["cache_creation"]
            w5, w1 = split["ephemeral_5m_input_tokens"], split["ephemeral_1h_input_tokens"]
            read = usage["cache_read_input_tokens"]
            totals["prompt"] += usage["input_tokens"] + read + w5 + w1
            totals["read"] += read
            totals["write_5m"] += w5
            totals["write_1h"] += w1
            totals["cost"] += (
                usage["input_tokens"] * RATES[0]
                + w5 * RATES[1]
                + w1 * RATES[2]
                + read * RATES[3]
                + usage["output_tokens"] * RATES[4]
            )
            totals["requests"] += 1
    return totals


def main() -> None:
    server = AnthropicServer(api_keys={KEY})
    with serving(server.app) as url:
        baseline = asyncio.run(_replay(url, server, autopilot=False))
        server.cache.clear()
        pilot = asyncio.run(_replay(url, server, autopilot=True))
    for name, figures in (("no breakpoints", baseline), ("autopilot", pilot)):
        share = figures["read"] / figures["prompt"]
        print(
            f"{name:>15}: {figures['requests']} requests, prompt {figures['prompt']:,} tokens, "
            f"read {figures['read']:,} ({share:.3f}), written 5m {figures['write_5m']:,} / "
            f"1h {figures['write_1h']:,}, cost {figures['cost'] / 1e9:.4f} USD"
        )
    base_share = baseline["read"] / baseline["prompt"]
    share = pilot["read"] / pilot["prompt"]
    print(
        f"RESULT requests={pilot['requests']} read_share_autopilot={share:.3f} "
        f"read_share_baseline={base_share:.3f} "
        f"cost_ratio={pilot['cost'] / baseline['cost']:.3f} "
        f"writes_1h_tokens={pilot['write_1h']} writes_5m_tokens={pilot['write_5m']}"
    )


if __name__ == "__main__":
    main()
