"""Time to first token of the reference worker: a ~4k-token prompt, cached prefix vs none.

Each cached run sends 4,096 tokens whose first 3,900 were sent before under the same
``cache_salt`` (so 3,888 = 243 whole blocks hit and 208 tokens are prefilled); each uncached
run sends a 4,096-token prompt under a fresh salt, so nothing can hit. ``--via engine``
(default) times ``Engine.generate`` in-process: submit to first sampled token, no HTTP.
``--via http`` times a streaming ``/v1/completions`` to its first SSE chunk through the
in-process uvicorn launcher. Runs use one CPU thread unless ``--threads`` says otherwise.

    .venv/bin/python bench/engine_ttft.py [--device cpu|cuda] [--runs N] [--via engine|http]

The last line is ``RESULT key=value ...`` for scripts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

# Run as a script from anywhere: make the repository root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# torch warns at import when NumPy is absent; nothing here uses NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import httpx  # noqa: E402
import torch  # noqa: E402

from workers.engine.config import CacheConfig, EngineConfig  # noqa: E402
from workers.engine.engine import Engine  # noqa: E402
from workers.engine.launcher import serve  # noqa: E402
from workers.engine.request import SamplingParams  # noqa: E402
from workers.engine.tokenizer import BOS_TOKEN_ID  # noqa: E402

PROMPT_TOKENS = 4096
SHARED_TOKENS = 3900
FIRST_TOKEN = SamplingParams(max_tokens=1, temperature=0.0)


def _tokens(length: int, variant: int) -> list[int]:
    """Printable bytes that differ per variant from the first position on."""
    return [(i * 31 + variant * 17 + i // 7) % 94 + 33 for i in range(length)]


def _prompts(runs: int) -> tuple[list[int], list[list[int]], list[list[int]]]:
    shared = [BOS_TOKEN_ID, *_tokens(SHARED_TOKENS - 1, 0)]
    tail = PROMPT_TOKENS - SHARED_TOKENS
    cached = [shared + _tokens(tail, 100 + r) for r in range(runs + 1)]
    uncached = [[BOS_TOKEN_ID, *_tokens(PROMPT_TOKENS - 1, 200 + r)] for r in range(runs + 1)]
    return shared, cached, uncached


def _time_engine(engine: Engine, prompt: list[int], salt: str) -> tuple[float, int]:
    result = engine.generate(prompt, FIRST_TOKEN, cache_salt=salt)
    assert result.ttft_s is not None
    return result.ttft_s, result.num_cached_tokens


def _time_http(client: httpx.Client, prompt: list[int], salt: str) -> tuple[float, int]:
    body = {
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
        "stream": True,
        "cache_salt": salt,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    ttft, cached = None, 0
    with client.stream("POST", "/v1/completions", json=body) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            if ttft is None:
                ttft = time.perf_counter() - start
            details = (json.loads(line[6:]).get("usage") or {}).get("prompt_tokens_details")
            cached = details["cached_tokens"] if details else cached
    assert ttft is not None
    return ttft, cached


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--via", choices=("engine", "http"), default="engine")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = EngineConfig(
        device=args.device,
        num_threads=args.threads,
        cache_config=CacheConfig(kv_cache_memory_bytes=128 * 2**20),
        enable_prompt_tokens_details=True,
    )
    shared, cached_prompts, uncached_prompts = _prompts(args.runs)
    m = config.model_config
    print(
        f"reference model: {m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads "
        f"({m.num_kv_heads} KV) x {m.head_dim}, {m.dtype}; device {args.device}, "
        f"{args.threads} thread(s), timed via {args.via}"
    )
    uncached_s: list[float] = []
    cached_s: list[float] = []
    hits: list[int] = []
    with serve(config) as worker, httpx.Client(base_url=worker.base_url, timeout=300) as client:

        def timed(prompt: list[int], salt: str) -> tuple[float, int]:
            if args.via == "http":
                return _time_http(client, prompt, salt)
            return _time_engine(worker.engine, prompt, salt)

        timed(shared + [33], "doc")  # caches the 3,900-token document prefix
        # Index 0 of each list warms up allocator and kernels and is not reported.
        for run, (cached, uncached) in enumerate(
            zip(cached_prompts, uncached_prompts, strict=True)
        ):
            t_uncached, _ = timed(uncached, f"fresh-{run}")
            t_cached, hit = timed(cached, "doc")
            if run:
                uncached_s.append(t_uncached)
                cached_s.append(t_cached)
                hits.append(hit)
            print(
                f"run {run}{' (warm-up)' if not run else ''}: uncached {t_uncached * 1e3:8.1f} ms"
                f"   cached {t_cached * 1e3:7.1f} ms ({hit} tokens hit)"
            )
    if set(hits) != {SHARED_TOKENS // 16 * 16}:
        print(f"unexpected cache hits: {hits}", file=sys.stderr)
        return 1
    uncached_ms = statistics.median(uncached_s) * 1e3
    cached_ms = statistics.median(cached_s) * 1e3
    speedup = uncached_ms / cached_ms
    prefill_tok_s = PROMPT_TOKENS / (uncached_ms / 1e3)
    computed = PROMPT_TOKENS - hits[0]
    print(f"median TTFT uncached: {uncached_ms:.1f} ms ({PROMPT_TOKENS} tokens prefilled)")
    print(f"median TTFT cached:   {cached_ms:.1f} ms ({computed} tokens prefilled)")
    print(f"speedup: {speedup:.1f}x (target >= 8x on CPU); prefill {prefill_tok_s:,.0f} tok/s")
    print(
        f"RESULT device={args.device} via={args.via} threads={args.threads} "
        f"prompt_tokens={PROMPT_TOKENS} cached_tokens={hits[0]} runs={args.runs} "
        f"ttft_uncached_ms={uncached_ms:.1f} ttft_cached_ms={cached_ms:.1f} "
        f"speedup={speedup:.2f} prefill_tok_s={prefill_tok_s:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
