"""Turns one scheduled step into tensors, runs the model and samples the next tokens."""

from __future__ import annotations

from collections.abc import Callable

import torch

from workers.engine.config import EngineConfig
from workers.engine.model import PagedKVCache, RefModel, SeqSlice
from workers.engine.request import Request
from workers.engine.sampler import sample
from workers.engine.scheduler import ScheduledRequest


class ModelRunner:
    """Owns the weights and the physical KV tensors on the chosen device."""

    def __init__(self, config: EngineConfig) -> None:
        self.device = torch.device(config.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda was asked for, but torch sees no CUDA device")
        self.block_size = config.cache_config.block_size
        self.model = RefModel(config.model_config, self.device)
        self.kv = PagedKVCache(
            config.model_config,
            num_blocks=config.num_gpu_blocks,
            block_size=self.block_size,
            dtype=config.cache_torch_dtype,
            device=self.device,
        )
        self.generator = torch.Generator().manual_seed(config.seed)

    def execute(
        self,
        scheduled: list[ScheduledRequest],
        block_ids: Callable[[Request], list[int]],
    ) -> list[tuple[Request, int, float]]:
        """Compute every scheduled token; sample for requests whose last token was computed.

        Returns ``(request, token, logprob)`` for each sampled request; callers advance
        ``num_computed_tokens`` themselves (so the scheduler's view stays in one place).
        """
        bs = self.block_size
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seqs: list[SeqSlice] = []
        sampled: list[Request] = []
        for item in scheduled:
            request, start = item.request, item.request.num_computed_tokens
            end = start + item.num_new_tokens
            table = block_ids(request)
            tokens.extend(request.all_token_ids[start:end])
            positions.extend(range(start, end))
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, end))
            need_logits = end == request.num_tokens
            seqs.append(
                SeqSlice(
                    block_table=torch.tensor(table, dtype=torch.long, device=self.device),
                    num_computed=start,
                    num_new=item.num_new_tokens,
                    need_logits=need_logits,
                )
            )
            if need_logits:
                sampled.append(request)

        def as_tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=self.device)

        logits = self.model.forward(
            as_tensor(tokens), as_tensor(positions), as_tensor(slots), seqs, self.kv
        )
        if not sampled:
            return []
        ids, logprobs = sample(logits, sampled, self.generator)
        return list(zip(sampled, ids, logprobs, strict=True))
