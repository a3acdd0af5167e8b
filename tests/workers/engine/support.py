"""Tiny model configs shared by the reference-worker tests (plain helpers, not fixtures)."""

from __future__ import annotations

import dataclasses
from typing import Any

from workers.engine.config import CacheConfig, EngineConfig, ModelConfig

# 2 layers x 2 KV heads x 16 dims in fp32: 512 bytes per token, 8 KiB per 16-token block.
TINY_MODEL = ModelConfig(
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    max_position_embeddings=1024,
)
BLOCK_BYTES = 16 * 512


def tiny_config(
    *, num_blocks: int = 128, max_model_len: int = 512, **overrides: Any
) -> EngineConfig:
    """An engine config whose pool holds exactly ``num_blocks`` blocks (null block included)."""
    cache_overrides = {
        k: overrides.pop(k)
        for k in list(overrides)
        if k in {f.name for f in dataclasses.fields(CacheConfig)}
    }
    cache = CacheConfig(kv_cache_memory_bytes=num_blocks * BLOCK_BYTES, **cache_overrides)
    return EngineConfig(
        model="test/ref-tiny",
        model_config=TINY_MODEL,
        cache_config=cache,
        max_model_len=max_model_len,
        **overrides,
    )
