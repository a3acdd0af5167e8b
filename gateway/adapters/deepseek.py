"""DeepSeek: OpenAI-compatible Chat Completions (``gateway.adapters.openai``) at
``CACHEPLANE_DEEPSEEK_BASE_URL``.

DeepSeek caches on disk automatically (no key, no breakpoints: the autopilot has nothing
to set) and reports ``prompt_cache_hit_tokens`` and ``prompt_cache_miss_tokens`` (their
sum is ``prompt_tokens``); ``deepseek-reasoner`` reports its chain of thought in
``completion_tokens_details.reasoning_tokens`` (billed as output). The off-peak discount
is the price book's (a UTC window on the model price), applied at settlement.
"""

from __future__ import annotations

from gateway.adapters.openai import CHAT_PARAMETERS, OpenAIAdapter

#: What DeepSeek's chat API documents (no audio, no prompt_cache_key, no n > 1).
DEEPSEEK_PARAMETERS = CHAT_PARAMETERS - {
    "modalities",
    "audio",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "verbosity",
    "metadata",
    "store",
    "reasoning_effort",
    "n",
    "seed",
    "parallel_tool_calls",
}


class DeepSeekAdapter(OpenAIAdapter):
    provider = "deepseek"
    label = "DeepSeek"
    sets_prompt_cache_key = False
    parameters = DEEPSEEK_PARAMETERS
