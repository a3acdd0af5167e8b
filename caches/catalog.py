"""Models a cache can be created for, with the facts validation needs before any call.

Minimum token counts conflict across Google's pages (spec §1.8), so they are per-model
configuration and the provider's own 400 stays authoritative; the pre-check here only
avoids sending content that is certainly too small. vLLM models are whatever the
registered workers serve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from caches.content import CacheContent


@dataclass(frozen=True)
class ModelFacts:
    provider: str
    name: str
    min_cache_tokens: int


VERTEX_MODELS: dict[str, ModelFacts] = {
    m.name: m
    for m in (
        ModelFacts("vertex", "gemini-2.5-flash", 1024),
        ModelFacts("vertex", "gemini-2.5-pro", 2048),
        ModelFacts("vertex", "gemini-2.5-flash-lite", 2048),
        ModelFacts("vertex", "gemini-2.0-flash", 2048),
        ModelFacts("vertex", "gemini-3-flash-preview", 4096),
        ModelFacts("vertex", "gemini-3.1-pro-preview", 1024),
    )
}


#: The shortest TTL each provider accepts, in seconds. Vertex: "minimum 1 minute" (spec
#: §1.3, context-cache-create); a shorter ttl is refused remotely after we accepted it.
#: vLLM has no TTL of its own (we pin blocks ourselves), so any positive TTL works.
PROVIDER_MIN_TTL_SECONDS: dict[str, int] = {"vertex": 60, "vllm": 1}


def vertex_token_estimate(content: CacheContent) -> int:
    """Conservative estimate (UTF-8 bytes / 4) used only for the minimum pre-check."""
    return math.ceil(content.inline_bytes() / 4)


def creation_token_estimate(provider: str, content: CacheContent) -> int:
    """The tokens a cache is priced at before its provider has counted them.

    Vertex: its inline bytes / 4. vLLM: the rendered prefix's characters / 4 (the
    worker's own count replaces it once the warm-up reports ``prompt_tokens``).
    """
    if provider == "vertex":
        return vertex_token_estimate(content)
    return max(1, len(content.render_prefix()) // 4)


def vllm_models() -> set[str]:
    """Models served by at least one registered worker."""
    from workers.models import Worker

    return set(Worker.objects.values_list("model", flat=True).distinct())
