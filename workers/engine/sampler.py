"""Greedy and seeded temperature / top-k / top-p sampling over one step's logits."""

from __future__ import annotations

import torch

from workers.engine.request import Request
from workers.engine.tokenizer import EOS_TOKEN_ID


def sample(
    logits: torch.Tensor, requests: list[Request], default_generator: torch.Generator
) -> tuple[list[int], list[float]]:
    """Pick one token per row; return the tokens and their log-probabilities (raw logits).

    Runs on the CPU whatever the model's device: the vocabulary is tiny, and CPU generators
    make seeded sampling identical on every device.
    """
    logits = logits.detach().to("cpu", torch.float32)
    logprobs = torch.log_softmax(logits, dim=-1)
    tokens: list[int] = []
    chosen: list[float] = []
    for row, request in enumerate(requests):
        params = request.sampling
        scores = logits[row].clone()
        if len(request.output_token_ids) < params.min_tokens:
            banned = list(params.stop_token_ids)
            if not params.ignore_eos:
                banned.append(EOS_TOKEN_ID)
            scores[banned] = float("-inf")
        if params.greedy:
            token = int(torch.argmax(scores))
        else:
            token = _draw(scores, request, default_generator)
        tokens.append(token)
        chosen.append(float(logprobs[row, token]))
    return tokens, chosen


def _draw(scores: torch.Tensor, request: Request, default_generator: torch.Generator) -> int:
    params = request.sampling
    scores = scores / params.temperature
    if 0 < params.top_k < scores.numel():
        kth = torch.topk(scores, params.top_k).values[-1]
        scores[scores < kth] = float("-inf")
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(-1)
        # Keep the smallest set whose mass reaches top_p (the first token always stays).
        drop = cumulative - torch.softmax(sorted_scores, dim=-1) >= params.top_p
        scores[order[drop]] = float("-inf")
    probs = torch.softmax(scores, dim=-1)
    generator = request.generator or default_generator
    return int(torch.multinomial(probs, 1, generator=generator))
