"""The result of one routing decision, shared by the exact and the approximate mode."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.directory import WorkerView


@dataclass
class RouteDecision:
    """What the route step needs: failover order and what the choice predicts."""

    candidates: list[WorkerView]
    mode: str  # "exact" | "approximate"
    reason: str  # why this mode ("fresh", "stale_index", "redis_down", "no_tokenizer", ...)
    available_tokens: int  # longest cached prefix anywhere in the pool (predicted)
    routed_tokens: int  # predicted cached tokens on candidates[0]
    chain: list[str] = field(default_factory=list)  # record in the approximate index
    holders: tuple[str, ...] = ()
