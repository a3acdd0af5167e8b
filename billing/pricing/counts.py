"""What a request used and what it cost: token counts (one convention for every provider,
see ``billing.pricing``) and the resulting cost with its without-cache counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass

from billing.pricing.units import nanos_to_micros

COUNT_FIELDS = (
    "prompt_tokens",
    "cached_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "thinking_tokens",
    "audio_prompt_tokens",
    "audio_cached_read_tokens",
    "audio_output_tokens",
)


@dataclass(frozen=True)
class UsageCounts:
    """Raw token counts of one request (convention: ``billing.pricing``'s docstring)."""

    prompt_tokens: int = 0
    cached_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0
    thinking_tokens: int = 0
    audio_prompt_tokens: int = 0
    audio_cached_read_tokens: int = 0
    audio_output_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        return (
            self.prompt_tokens
            - self.cached_read_tokens
            - self.cache_write_5m_tokens
            - self.cache_write_1h_tokens
        )

    @property
    def total_output_tokens(self) -> int:
        return self.output_tokens + self.thinking_tokens + self.audio_output_tokens

    def problems(self) -> list[str]:
        """Why these counts are impossible (empty when they are consistent)."""
        found = []
        for name in COUNT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                found.append(f"{name} must be a non-negative integer")
        if found:
            return found
        if self.uncached_input_tokens < 0:
            found.append("cached and cache-write tokens exceed prompt_tokens")
        if self.audio_cached_read_tokens > self.cached_read_tokens:
            found.append("audio_cached_read_tokens exceed cached_read_tokens")
        if self.audio_prompt_tokens - self.audio_cached_read_tokens > max(
            self.uncached_input_tokens, 0
        ):
            found.append("uncached audio tokens exceed the uncached prompt")
        return found


@dataclass(frozen=True)
class Cost:
    """A request's cost and what it would have cost without any caching (nano-USD)."""

    nanos: int
    without_cache_nanos: int
    lines: dict[str, int]

    @property
    def micros(self) -> int:
        return nanos_to_micros(self.nanos)

    @property
    def without_cache_micros(self) -> int:
        return nanos_to_micros(self.without_cache_nanos)

    @property
    def saved_nanos(self) -> int:
        return self.without_cache_nanos - self.nanos

    @property
    def saved_micros(self) -> int:
        return nanos_to_micros(self.saved_nanos)
