"""Which cache TTLs each provider sells: a TTL it does not offer is refused, not priced."""

from __future__ import annotations

# The cache TTLs each provider really offers, in seconds (None: any TTL its API accepts,
# from ``PROVIDER_MIN_TTL`` up). Anthropic sells exactly two: 5 minutes (writes 1.25x)
# and 1 hour (writes 2x); a 30-minute TTL does not exist there and is refused rather than
# priced at the 1-hour rate. Vertex explicit caches take any TTL from 60 s (no documented
# maximum); OpenAI and DeepSeek cache automatically, so a TTL there is a modelling
# assumption for the break-even analysis (any positive value), not a purchase.
PROVIDER_TTL_CHOICES: dict[str, tuple[int, ...] | None] = {
    "anthropic": (300, 3600),
    "vertex": None,
    "vllm": None,
    "openai": None,
    "deepseek": None,
}
PROVIDER_MIN_TTL = {"vertex": 60, "vllm": 1}


def ttl_offered(*, provider: str, ttl_seconds: int) -> bool:
    """Whether ``provider`` sells a cache with this TTL (see ``PROVIDER_TTL_CHOICES``)."""
    choices = PROVIDER_TTL_CHOICES.get(provider)
    if choices is None:
        return ttl_seconds >= PROVIDER_MIN_TTL.get(provider, 1)
    return ttl_seconds in choices
