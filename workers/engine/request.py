"""Requests as the engine sees them, their sampling parameters and their output deltas."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from workers.engine.tokenizer import IncrementalDetokenizer


class FinishReason(enum.StrEnum):
    """Values of ``finish_reason`` and of the ``request_success_total`` label."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass(frozen=True)
class SamplingParams:
    """The subset of vLLM's SamplingParams the reference worker honours."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5


@dataclass
class RequestOutput:
    """What one engine step produced for one request (a delta, not the whole output)."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[float]
    text_delta: str
    finished: bool
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    error: str | None = None


OutputSink = Callable[[RequestOutput], None]


@dataclass(eq=False)
class Request:
    """Engine-side state of one request; owned and mutated by the engine thread only."""

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams
    sink: OutputSink
    cache_salt: str | None = None
    arrival_time: float = field(default_factory=time.monotonic)
    output_token_ids: list[int] = field(default_factory=list)
    all_token_ids: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)
    num_computed_tokens: int = 0
    # Set when first scheduled and kept through preemptions, as vLLM reports it.
    num_cached_tokens: int = -1
    status: RequestStatus = RequestStatus.WAITING
    generator: torch.Generator | None = None
    first_token_time: float | None = None
    text: str = ""
    emitted_text_len: int = 0
    detokenizer: IncrementalDetokenizer = field(default_factory=IncrementalDetokenizer)

    def __post_init__(self) -> None:
        if not self.all_token_ids:
            self.all_token_ids = list(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    def append_output(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)
