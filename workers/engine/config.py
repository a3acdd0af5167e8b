"""Configuration of the reference worker: model shape, KV cache sizing and engine limits.

Sizing follows vLLM: bytes per token = 2 (K and V) x layers x KV heads x head size x bytes per
element, and the block pool is whatever ``--kv-cache-memory`` holds in whole blocks, block 0
included (vLLM reserves it as the null block, and ``num_gpu_blocks`` counts it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from workers.engine.kv_events import KVEventsConfig
from workers.engine.tokenizer import VOCAB_SIZE

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}
# fp8 caches store an unscaled cast (vLLM applies per-tensor scales; a random-weight model
# has no calibration data, and activations here stay far inside the e4m3 range).
_CACHE_DTYPES: dict[str, torch.dtype] = {
    **_DTYPES,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
SUPPORTED_HASH_ALGOS = ("sha256_cbor", "sha256")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*$")


def parse_size(text: str | int) -> int:
    """Parse a byte count such as ``67108864``, ``64M``, ``64MiB``, ``1G`` or ``500m``.

    Follows vLLM's ``human_readable_int``: upper-case suffixes are binary (K = 1024),
    lower-case ones decimal (k = 1000); an ``iB`` suffix is always binary.
    """
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a byte size: {text!r} (examples: 67108864, 64M, 1G, 512MiB)")
    number, unit, suffix = match.groups()
    binary = unit.isupper() or (suffix is not None and suffix.lower() == "ib")
    power = " kmgt".index(unit.lower()) if unit else 0
    return int(float(number) * (1024 if binary else 1000) ** power)


def resolve_dtype(name: str, *, for_cache: bool = False) -> torch.dtype:
    """Map a vLLM dtype name to torch; raise ValueError naming the accepted values."""
    table = _CACHE_DTYPES if for_cache else _DTYPES
    try:
        return table[name.lower()]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; choose one of {sorted(table)}") from None


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the random-weight decoder. Defaults prefill 4,096 tokens in ~0.5 s on one core."""

    num_layers: int = 4
    hidden_size: int = 256
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 1024
    max_position_embeddings: int = 8192
    rope_theta: float = 10000.0
    weight_seed: int = 0
    dtype: str = "float32"
    vocab_size: int = VOCAB_SIZE

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads (GQA groups)")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (rotary embedding pairs)")
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        resolve_dtype(self.dtype)

    @property
    def torch_dtype(self) -> torch.dtype:
        return resolve_dtype(self.dtype)


@dataclass(frozen=True)
class CacheConfig:
    """Paged KV cache settings; field names match vLLM's CacheConfig where one exists."""

    block_size: int = 16
    kv_cache_memory_bytes: int = 64 * 2**20
    cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: str = "sha256_cbor"
    hash_seed: str = "0"

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError("block_size must be positive")
        if self.prefix_caching_hash_algo not in SUPPORTED_HASH_ALGOS:
            raise ValueError(
                f"--prefix-caching-hash-algo {self.prefix_caching_hash_algo!r} is not supported "
                f"by the reference worker; choose one of {list(SUPPORTED_HASH_ALGOS)}"
            )
        if self.cache_dtype != "auto":
            resolve_dtype(self.cache_dtype, for_cache=True)

    def torch_cache_dtype(self, model_dtype: torch.dtype) -> torch.dtype:
        if self.cache_dtype == "auto":
            return model_dtype
        return resolve_dtype(self.cache_dtype, for_cache=True)


@dataclass(frozen=True)
class EngineConfig:
    """Everything one reference worker needs; built by the CLI, the launcher or tests."""

    model: str = "cacheplane/ref-tiny"
    served_model_names: tuple[str, ...] = ()
    model_config: ModelConfig = field(default_factory=ModelConfig)
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    device: str = "cpu"
    max_model_len: int | None = None
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 64
    seed: int = 0
    enable_prompt_tokens_details: bool = False
    enable_server_load_tracking: bool = False
    enable_request_id_headers: bool = False
    kv_events: KVEventsConfig | None = None
    api_keys: tuple[str, ...] = ()
    dev_mode: bool = False
    num_threads: int | None = None

    @property
    def model_name(self) -> str:
        """The ``model_name`` metric label: the first served name, else ``--model``."""
        return self.served_model_names[0] if self.served_model_names else self.model

    @property
    def served_names(self) -> tuple[str, ...]:
        return self.served_model_names or (self.model,)

    @property
    def cache_torch_dtype(self) -> torch.dtype:
        return self.cache_config.torch_cache_dtype(self.model_config.torch_dtype)

    @property
    def kv_bytes_per_token(self) -> int:
        m = self.model_config
        element = torch.empty((), dtype=self.cache_torch_dtype).element_size()
        return 2 * m.num_layers * m.num_kv_heads * m.head_dim * element

    @property
    def num_gpu_blocks(self) -> int:
        """Blocks the pool holds, the null block included (vLLM's ``num_gpu_blocks``)."""
        per_block = self.kv_bytes_per_token * self.cache_config.block_size
        return self.cache_config.kv_cache_memory_bytes // per_block

    @property
    def resolved_max_model_len(self) -> int:
        return self.max_model_len or self.model_config.max_position_embeddings

    @property
    def kv_capacity_tokens(self) -> int:
        return max(self.num_gpu_blocks - 1, 0) * self.cache_config.block_size

    def validate(self) -> None:
        """Fail at start, like vLLM, when one max-length request could not fit in the pool."""
        if self.num_gpu_blocks < 2:
            raise ValueError(
                f"--kv-cache-memory {self.cache_config.kv_cache_memory_bytes} bytes holds "
                f"{self.num_gpu_blocks} blocks of {self.cache_config.block_size} tokens at "
                f"{self.kv_bytes_per_token} bytes/token; at least 2 (the null block plus one) "
                "are needed"
            )
        max_len = self.resolved_max_model_len
        if max_len > self.model_config.max_position_embeddings:
            raise ValueError(
                f"max_model_len {max_len} exceeds the model's max_position_embeddings "
                f"{self.model_config.max_position_embeddings}"
            )
        if max_len > self.kv_capacity_tokens:
            needed = max_len * self.kv_bytes_per_token
            raise ValueError(
                f"To serve at least one request with the model's max seq len ({max_len}), "
                f"{needed} bytes of KV cache are needed, which is larger than the available KV "
                f"cache memory ({self.cache_config.kv_cache_memory_bytes} bytes, "
                f"{self.kv_capacity_tokens} tokens). Try increasing --kv-cache-memory or "
                "decreasing --max-model-len."
            )
        if self.max_num_batched_tokens < self.cache_config.block_size:
            raise ValueError("max_num_batched_tokens must be at least one block")
