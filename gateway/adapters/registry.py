"""Which adapter serves a model: a named cache's provider, a worker pool, Vertex, or a
hosted provider (Anthropic, OpenAI, DeepSeek) by the hosted catalog."""

from __future__ import annotations

from cachetools import TTLCache

from controlplane.db import db_sync_to_async
from gateway.adapters.anthropic import AnthropicAdapter
from gateway.adapters.base import Adapter
from gateway.adapters.deepseek import DeepSeekAdapter
from gateway.adapters.hosted import HOSTED_MODELS
from gateway.adapters.openai import OpenAIAdapter
from gateway.adapters.vertex import VertexAdapter
from gateway.adapters.vllm import VllmAdapter
from gateway.directory import REFRESH_SECONDS, CacheView, directory
from gateway.errors import GatewayError

ADAPTERS: dict[str, Adapter] = {
    "vllm": VllmAdapter(),
    "vertex": VertexAdapter(),
    "anthropic": AnthropicAdapter(),
    "openai": OpenAIAdapter(),
    "deepseek": DeepSeekAdapter(),
}
_registered: TTLCache[str, bool] = TTLCache(maxsize=10_000, ttl=REFRESH_SECONDS)  # event loop


def _registered_anywhere(model: str) -> bool:
    from workers.models import Worker

    return Worker.objects.filter(model=model).exists()


async def _known_vllm_model(model: str) -> bool:
    """A model some worker is registered for, healthy or not (cached like the directory):
    all its workers down is ``503 no_worker``, not ``404 model_not_found``."""
    found = _registered.get(model)
    if found is None:
        found = _registered[model] = await db_sync_to_async(_registered_anywhere)(model)
    return found


async def adapter_for(model: str, cache: CacheView | None) -> Adapter:
    from caches.catalog import VERTEX_MODELS

    await directory.current_workers()
    if cache is not None:
        return ADAPTERS[cache.provider]
    if directory.serving(model):
        return ADAPTERS["vllm"]
    if model in VERTEX_MODELS:
        return ADAPTERS["vertex"]
    if model in HOSTED_MODELS:
        return ADAPTERS[HOSTED_MODELS[model].provider]
    if await _known_vllm_model(model):
        return ADAPTERS["vllm"]  # its route step answers 503 no_worker
    raise GatewayError(
        404, "model_not_found", f"The model {model!r} does not exist.", param="model"
    )


def forget() -> None:
    _registered.clear()
