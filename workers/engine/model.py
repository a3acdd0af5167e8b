"""A small Llama-style decoder with random weights that attends over paged KV blocks.

The weights are noise from a fixed seed, so the text is gibberish; what matters is that the
compute is real: prefill costs grow with the uncached suffix times the context, cached K/V is
read back from physical blocks through block tables, and a prefix hit produces the same
logits (to float rounding) as recomputing the prefix. Architecture: RMSNorm, rotary
embeddings, grouped-query attention, SwiGLU MLP, untied LM head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workers.engine.config import ModelConfig
from workers.engine.tokenizer import EOS_TOKEN_ID

_EPS = 1e-5


@dataclass
class SeqSlice:
    """One sequence's share of a batched forward pass.

    ``num_computed`` tokens are already in the cache (a prefix hit or earlier steps);
    ``num_new`` tokens are computed now at positions ``num_computed ...``. ``block_table``
    maps the sequence's logical blocks to physical ones and covers every position touched.
    """

    block_table: torch.Tensor
    num_computed: int
    num_new: int
    need_logits: bool


class PagedKVCache:
    """Physical K and V tensors per layer, ``[num_blocks, block_size, kv_heads, head_dim]``.

    Preallocated once, as vLLM does, so memory use is fixed by ``--kv-cache-memory`` and a
    block id is an index into every layer's tensors.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
        self.block_size = block_size
        self.dtype = dtype
        self.key = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)
        ]
        self.value = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)
        ]

    def _raw(self, t: torch.Tensor) -> torch.Tensor:
        # CPU index kernels do not cover float8; moving raw bytes through a uint8 view does.
        return t.view(torch.uint8) if t.element_size() == 1 else t

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        for cache, new in ((self.key[layer], k), (self.value[layer], v)):
            flat = self._raw(cache).view(-1, *cache.shape[2:])
            flat.index_copy_(0, slots, self._raw(new.to(self.dtype)))

    def gather(
        self, layer: int, block_table: torch.Tensor, length: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of positions ``0..length-1`` as ``[kv_heads, length, head_dim]``."""
        ids = block_table[: -(-length // self.block_size)]
        out = []
        for cache in (self.key[layer], self.value[layer]):
            rows = self._raw(cache).index_select(0, ids).view(self.dtype).flatten(0, 1)[:length]
            out.append(rows.transpose(0, 1).to(dtype))
        return out[0], out[1]


class RefModel:
    """Weights and the forward pass; stateless apart from the weights."""

    def __init__(self, config: ModelConfig, device: torch.device) -> None:
        self.config = config
        self.device = device
        self.dtype = config.torch_dtype
        self._build_weights()

    def _build_weights(self) -> None:
        # Drawn on the CPU in fp32 so every device and dtype starts from the same numbers.
        c = self.config
        gen = torch.Generator().manual_seed(c.weight_seed)

        def normal(*shape: int, std: float) -> torch.Tensor:
            w = torch.randn(*shape, generator=gen, dtype=torch.float32) * std
            return w.to(device=self.device, dtype=self.dtype)

        q_dim, kv_dim = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        residual_scale = 1.0 / math.sqrt(2 * c.num_layers)
        self.embed = normal(c.vocab_size, c.hidden_size, std=1.0)
        self.layers = []
        for _ in range(c.num_layers):
            self.layers.append(
                {
                    "attn_norm": torch.ones(c.hidden_size, device=self.device, dtype=self.dtype),
                    "qkv": normal(c.hidden_size, q_dim + 2 * kv_dim, std=c.hidden_size**-0.5),
                    "o": normal(q_dim, c.hidden_size, std=q_dim**-0.5 * residual_scale),
                    "mlp_norm": torch.ones(c.hidden_size, device=self.device, dtype=self.dtype),
                    "gate_up": normal(
                        c.hidden_size, 2 * c.intermediate_size, std=c.hidden_size**-0.5
                    ),
                    "down": normal(
                        c.intermediate_size,
                        c.hidden_size,
                        std=c.intermediate_size**-0.5 * residual_scale,
                    ),
                }
            )
        self.final_norm = torch.ones(c.hidden_size, device=self.device, dtype=self.dtype)
        # A wide logit spread keeps greedy choices far from ties, so float reordering between
        # cached and uncached prefill never flips a token.
        self.lm_head = normal(c.hidden_size, c.vocab_size, std=4.0 * c.hidden_size**-0.5)
        # Favour printable ASCII and newlines so the gibberish reads as text in consoles and
        # logs, and keep EOS rare so lengths are governed by max_tokens.
        bias = torch.full((c.vocab_size,), -2.0)
        bias[32:127] = 2.0
        bias[10] = 0.0
        bias[EOS_TOKEN_ID] = -4.0
        self.lm_bias = bias.to(device=self.device, dtype=self.dtype)
        inv_freq = 1.0 / (
            c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim)
        )
        angles = torch.outer(torch.arange(c.max_position_embeddings, dtype=torch.float32), inv_freq)
        self.rope_cos = angles.cos().to(device=self.device, dtype=self.dtype)
        self.rope_sin = angles.sin().to(device=self.device, dtype=self.dtype)

    def drop_weights(self) -> None:
        """Free the weights (sleep level 2); :meth:`reload_weights` rebuilds them from the seed."""
        self.layers = []
        self.embed = self.lm_head = torch.empty(0)

    def reload_weights(self) -> None:
        self._build_weights()

    @property
    def has_weights(self) -> bool:
        return bool(self.layers)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos = self.rope_cos[positions].unsqueeze(1)
        sin = self.rope_sin[positions].unsqueeze(1)
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    @staticmethod
    def _norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + _EPS) * weight

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slot_mapping: torch.Tensor,
        seqs: list[SeqSlice],
        kv: PagedKVCache,
    ) -> torch.Tensor:
        """Run the new tokens of every sequence; return fp32 logits, one row per
        sequence with ``need_logits``, in order.

        Linear layers run on all tokens at once (continuous batching); attention runs per
        sequence over its own cached context, gathered from the paged blocks.
        """
        c = self.config
        q_dim, kv_dim = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        x = self.embed[input_ids]
        masks = [self._mask(seq, x.dtype) for seq in seqs]
        for index, layer in enumerate(self.layers):
            h = self._norm(x, layer["attn_norm"])
            q, k, v = torch.split(h @ layer["qkv"], [q_dim, kv_dim, kv_dim], dim=-1)
            q = self._rope(q.view(-1, c.num_heads, c.head_dim), positions)
            k = self._rope(k.view(-1, c.num_kv_heads, c.head_dim), positions)
            v = v.view(-1, c.num_kv_heads, c.head_dim)
            kv.write(index, slot_mapping, k, v)
            attn = torch.empty_like(q)
            offset = 0
            for seq, mask in zip(seqs, masks, strict=True):
                attn[offset : offset + seq.num_new] = self._attend(
                    q[offset : offset + seq.num_new], seq, mask, kv, index
                )
                offset += seq.num_new
            x = x + attn.reshape(-1, q_dim) @ layer["o"]
            h = self._norm(x, layer["mlp_norm"])
            gate, up = (h @ layer["gate_up"]).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer["down"]
        ends, offset = [], 0
        for seq in seqs:
            offset += seq.num_new
            if seq.need_logits:
                ends.append(offset - 1)
        last = x[torch.tensor(ends, dtype=torch.long, device=x.device)]
        return (self._norm(last, self.final_norm) @ self.lm_head + self.lm_bias).float()

    @staticmethod
    def _mask(seq: SeqSlice, dtype: torch.dtype) -> torch.Tensor | None:
        """Additive mask for new tokens after a cached prefix (built once per forward pass).

        A fresh prefill uses the kernel's causal mode and a single decode token sees the
        whole context, so only a suffix prefill needs an explicit mask: query ``i`` sits at
        position ``num_computed + i`` and sees keys up to there (bottom-right causal).
        """
        if seq.num_computed == 0 or seq.num_new == 1:
            return None
        context = seq.num_computed + seq.num_new
        device = seq.block_table.device
        rows = torch.arange(seq.num_computed, context, device=device).unsqueeze(1)
        visible = torch.arange(context, device=device).unsqueeze(0) <= rows
        mask = torch.zeros(visible.shape, dtype=dtype, device=device)
        return mask.masked_fill_(~visible, float("-inf"))

    def _attend(
        self,
        q: torch.Tensor,
        seq: SeqSlice,
        mask: torch.Tensor | None,
        kv: PagedKVCache,
        layer: int,
    ) -> torch.Tensor:
        # Reading the new tokens' K/V back from the cache (rather than using them directly)
        # makes a cached and an uncached prefill see identical, cache-dtype-rounded values.
        k, v = kv.gather(layer, seq.block_table, seq.num_computed + seq.num_new, q.dtype)
        q = q.transpose(0, 1).unsqueeze(0)
        k, v = k.unsqueeze(0), v.unsqueeze(0)
        causal = seq.num_computed == 0 and seq.num_new > 1
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True
        )
        return out.squeeze(0).transpose(0, 1)
