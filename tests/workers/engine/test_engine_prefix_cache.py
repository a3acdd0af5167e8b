"""Prefix caching through the engine: real hits, identical outputs, isolation, pressure."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.workers.engine.support import TINY_MODEL
from workers.engine.engine import Engine
from workers.engine.model import PagedKVCache, RefModel, SeqSlice
from workers.engine.request import FinishReason, SamplingParams
from workers.engine.tokenizer import BOS_TOKEN_ID

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)
LABELS = {"model_name": "test/ref-tiny", "engine": "0"}


def prompt(length: int, variant: int = 0) -> list[int]:
    return [BOS_TOKEN_ID] + [(i * 7 + variant * 13) % 95 + 32 for i in range(length - 1)]


def test_prefix_hit_produces_the_tokens_and_logprobs_of_a_full_prefill(
    make_engine: Callable[..., Engine],
) -> None:
    cached, plain = make_engine(), make_engine(enable_prefix_caching=False)
    shared = prompt(300)
    cached.generate(shared + prompt(20, variant=1)[1:], GREEDY)
    question = shared + prompt(37, variant=2)[1:]

    hit = cached.generate(question, GREEDY)
    full = plain.generate(question, GREEDY)

    assert hit.num_cached_tokens == 288  # 18 whole blocks of the shared 300 tokens
    assert full.num_cached_tokens == 0
    assert hit.token_ids == full.token_ids
    assert torch.allclose(torch.tensor(hit.logprobs), torch.tensor(full.logprobs), atol=1e-4)


def test_paged_prefill_over_cached_blocks_matches_full_prefill_logits() -> None:
    model = RefModel(TINY_MODEL, torch.device("cpu"))
    tokens = torch.tensor(prompt(90))
    positions = torch.arange(90)

    def run(table: list[int], start: int, end: int, kv: PagedKVCache) -> torch.Tensor:
        slots = torch.tensor([table[p // 16] * 16 + p % 16 for p in range(start, end)])
        seq = SeqSlice(torch.tensor(table), start, end - start, need_logits=True)
        return model.forward(tokens[start:end], positions[start:end], slots, [seq], kv)

    kv_full = PagedKVCache(
        TINY_MODEL, num_blocks=16, block_size=16, dtype=torch.float32, device=torch.device("cpu")
    )
    full = run([1, 2, 3, 4, 5, 6], 0, 90, kv_full)
    # Scattered physical blocks: the block table, not adjacency, defines the sequence.
    table = [9, 3, 14, 1, 7, 12]
    kv_paged = PagedKVCache(
        TINY_MODEL, num_blocks=16, block_size=16, dtype=torch.float32, device=torch.device("cpu")
    )
    run(table, 0, 64, kv_paged)
    suffix = run(table, 64, 90, kv_paged)
    assert torch.allclose(full, suffix, atol=1e-4)


def test_cached_tokens_are_whole_blocks_and_spare_the_last_token(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine()
    for length, expected in ((64, 48), (65, 64), (20, 16), (15, 0)):
        p = prompt(length, variant=length)
        assert engine.generate(p, GREEDY).num_cached_tokens == 0
        assert engine.generate(p, GREEDY).num_cached_tokens == expected


def test_blocks_filled_by_generated_tokens_are_cached_too(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine()
    p = prompt(10)
    first = engine.generate(p, SamplingParams(max_tokens=30, temperature=0.0))
    # 10 prompt + 29 computed output tokens fill two blocks; the last sampled one is unseen.
    follow_up = engine.generate(p + first.token_ids + prompt(5)[1:], GREEDY)
    assert follow_up.num_cached_tokens == 32


def test_equal_salts_share_blocks_and_different_salts_never_do(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine()
    p = prompt(100)
    assert engine.generate(p, GREEDY, cache_salt="tenant-a").num_cached_tokens == 0
    assert engine.generate(p, GREEDY, cache_salt="tenant-b").num_cached_tokens == 0
    assert engine.generate(p, GREEDY).num_cached_tokens == 0
    assert engine.generate(p, GREEDY, cache_salt="tenant-a").num_cached_tokens == 96
    assert engine.generate(p, GREEDY, cache_salt="tenant-b").num_cached_tokens == 96
    # Three separate chains of six blocks each: nothing was shared across salts.
    assert engine.snapshot()["cached_blocks"] == 18


def test_eviction_under_memory_pressure_keeps_outputs_correct(
    make_engine: Callable[..., Engine],
) -> None:
    small = make_engine(num_blocks=13, max_model_len=144)  # 12 usable blocks
    big = make_engine()
    a, b = prompt(100, variant=1), prompt(100, variant=2)
    prompts = [a, b, a, b]
    expected = [big.generate(p, GREEDY).token_ids for p in prompts]
    results = [small.generate(p, GREEDY) for p in prompts]
    assert [r.token_ids for r in results] == expected
    # Each request holds 7 blocks and caches 6. B takes the 5 unused blocks, then A's
    # partial tail and A's 6th block (freed tail-first, so evicted first): A keeps 5 blocks.
    assert [r.num_cached_tokens for r in results] == [0, 0, 80, 80]
    assert small.snapshot()["free_blocks"] == 12


def test_concurrent_requests_preempt_and_recompute_without_changing_outputs(
    make_engine: Callable[..., Engine],
) -> None:
    small = make_engine(num_blocks=12, max_model_len=160)  # 11 usable, each request needs 8
    big = make_engine()
    sampling = SamplingParams(max_tokens=80, temperature=0.0)
    prompts = [prompt(40, variant=v) for v in range(4)]
    expected = [big.generate(p, sampling).token_ids for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: small.generate(p, sampling), prompts))
    assert [r.token_ids for r in results] == expected
    assert all(r.finish_reason == FinishReason.LENGTH for r in results)
    registry = small.metrics.registry
    assert registry.get_sample_value("vllm:num_preemptions_total", LABELS) > 0
    snapshot = small.snapshot()
    assert (snapshot["running"], snapshot["waiting"], snapshot["free_blocks"]) == (0, 0, 11)


def test_abandoned_stream_is_aborted_and_frees_its_blocks(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine()

    async def first_output_only() -> None:
        stream = engine.stream(prompt(50), SamplingParams(max_tokens=400, temperature=0.0))
        async for _ in stream:
            break
        await stream.aclose()

    asyncio.run(first_output_only())
    registry = engine.metrics.registry
    snapshot = engine.snapshot()
    assert (snapshot["running"], snapshot["usage"]) == (0, 0.0)
    labels = {**LABELS, "finished_reason": "abort"}
    assert registry.get_sample_value("vllm:request_success_total", labels) == 1.0


def test_stop_string_truncates_text_and_reports_the_stop_reason(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine()
    p = prompt(30)
    free_run = engine.generate(p, SamplingParams(max_tokens=20, temperature=0.0))
    stop = free_run.text[6:8]
    cut = free_run.text.index(stop)
    stopped = engine.generate(p, SamplingParams(max_tokens=20, temperature=0.0, stop=(stop,)))
    assert stopped.text == free_run.text[:cut]
    assert (stopped.finish_reason, stopped.stop_reason) == (FinishReason.STOP, stop)


def test_seeded_sampling_is_reproducible(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine()
    p = prompt(30)
    runs = [
        engine.generate(p, SamplingParams(max_tokens=16, temperature=1.0, seed=s)).token_ids
        for s in (7, 7, 8)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_running_requests_share_cached_blocks_by_reference(
    make_engine: Callable[..., Engine],
) -> None:
    engine, plain = make_engine(), make_engine(enable_prefix_caching=False)
    shared = prompt(97)  # six whole blocks
    first_prompt, second_prompt = shared + prompt(9, 1)[1:], shared + prompt(12, 2)[1:]
    long, short = (SamplingParams(max_tokens=n, temperature=0.0) for n in (60, 10))

    async def overlap() -> tuple[list[int], list[int], int, int]:
        first = engine.stream(first_prompt, long)
        first_tokens = (await anext(first)).new_token_ids
        # The first request is still decoding and holds its blocks when the second hits them.
        second_tokens, hit = [], -1
        async for out in engine.stream(second_prompt, short):
            second_tokens += out.new_token_ids
            hit = out.num_cached_tokens
        running_after_second = engine.snapshot()["running"]
        async for out in first:
            first_tokens += out.new_token_ids
        return first_tokens, second_tokens, hit, running_after_second

    first_tokens, second_tokens, hit, running = asyncio.run(overlap())
    assert hit == 96 and running == 1
    assert first_tokens == plain.generate(first_prompt, long).token_ids
    assert second_tokens == plain.generate(second_prompt, short).token_ids
    snapshot = engine.snapshot()
    assert (snapshot["free_blocks"], snapshot["usage"]) == (127, 0.0)


def test_narrow_kv_dtypes_grow_the_pool_and_keep_hits_exact(
    make_engine: Callable[..., Engine],
) -> None:
    for dtype, blocks_per_block in (("bf16", 2), ("fp8", 4)):
        cached = make_engine(cache_dtype=dtype)
        plain = make_engine(cache_dtype=dtype, enable_prefix_caching=False)
        assert cached.config.num_gpu_blocks == 128 * blocks_per_block
        p = prompt(80)
        cached.generate(p, GREEDY)
        hit, full = cached.generate(p, GREEDY), plain.generate(p, GREEDY)
        assert hit.num_cached_tokens == 64
        assert hit.token_ids == full.token_ids
        assert torch.allclose(torch.tensor(hit.logprobs), torch.tensor(full.logprobs), atol=1e-4)


def test_chunked_prefill_matches_a_single_pass(make_engine: Callable[..., Engine]) -> None:
    chunked = make_engine(max_num_batched_tokens=32)
    whole = make_engine()
    prompts = [prompt(150, variant=v) for v in range(3)]
    expected = [whole.generate(p, GREEDY) for p in prompts]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda p: chunked.generate(p, GREEDY), prompts))
    for got, want in zip(results, expected, strict=True):
        assert got.token_ids == want.token_ids
        assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=1e-4)
    # Blocks were cached chunk by chunk, so a repeat hits all nine whole blocks.
    assert chunked.generate(prompts[0], GREEDY).num_cached_tokens == 144


def test_engine_refuses_prompts_that_cannot_fit(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_model_len=64)
    with pytest.raises(RuntimeError, match="max_model_len"):
        engine.generate(prompt(64), GREEDY)
    with pytest.raises(RuntimeError, match="max_model_len"):
        engine.generate([], GREEDY)
