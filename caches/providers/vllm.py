"""Prefix caches pinned on vLLM workers, over vLLM's HTTP protocol (httpx).

A vLLM "cache" is the tenant's rendered prefix held in the workers' paged KV cache under
the tenant's ``cache_salt``:
- create = warm: one ``/v1/chat/completions`` request whose first (system) message is the
  rendered prefix, with ``max_tokens=1`` and the salt, on each of the
  ``replication_factor`` workers the router prefers. The gateway sends the same system
  message first for requests naming the cache, so the chat template renders identical
  leading tokens and the prefix blocks hit;
- refresh = probe the same prompt: ``usage.prompt_tokens_details.cached_tokens`` confirms
  residency, and a miss re-warms it as a side effect (the probe recomputes the prefix);
- evict = stop pinning. vLLM has no per-prefix eviction and ``/reset_prefix_cache`` drops
  every tenant's blocks, so unpinned blocks age out by LRU; rotating the tenant's salt
  makes all of its blocks unreachable at once.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings

from caches.content import CacheContent
from caches.providers.base import (
    PermanentProviderError,
    Prefill,
    RemoteState,
    TransientProviderError,
)
from tenants.salt import tenant_cache_salt
from workers.routing import placement_for
from workers.secrets import unseal
from workers.selectors import worker_list_serving

if TYPE_CHECKING:
    from caches.models import CacheObject
    from workers.models import Worker


def placement_key(cache: CacheObject) -> str:
    """Routing key shared with the gateway: tenant and content digest."""
    return f"{cache.tenant_id}:{cache.content_digest}"


def prefix_message(cache: CacheObject) -> dict[str, str]:
    """The leading chat message that carries a vLLM cache's prefix (warm and gateway)."""
    return {"role": "system", "content": CacheContent.from_dict(cache.content).render_prefix()}


_shared: httpx.Client | None = None
_shared_lock = threading.Lock()


def shared_client() -> httpx.Client:
    """The process's client for warming workers (thread-safe; lives as long as the process)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = httpx.Client()
        return _shared


def placement(cache: CacheObject) -> list[Worker]:
    """The healthy workers a warm-up of ``cache`` goes to now (none: no worker serves
    its model)."""
    workers = list(worker_list_serving(model=cache.model))
    if not workers:
        return []
    return placement_for(placement_key(cache), workers, cache.replication_factor)


def placement_pool(cache: CacheObject) -> str:
    """The pool of :func:`placement`'s first worker ("" when none serves its model): what
    an economic vLLM cache is priced at before it is placed."""
    chosen = placement(cache)
    return chosen[0].pool if chosen else ""


class VllmProvider:
    """Warm, probe and unpin a cache's prefix on the worker pool serving its model."""

    def __init__(self, client: httpx.Client | None = None) -> None:
        # One pooled client per process rather than one per operation (never closed).
        self.client = client or shared_client()

    def _headers(self, request_id: str, worker: Worker) -> dict[str, str]:
        headers = {"X-Request-Id": request_id}
        key = unseal(worker.api_key_sealed) or settings.CACHEPLANE_VLLM_API_KEY
        if key:  # the worker's own key from the registry, else the deployment's
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _warm(self, worker: Worker, cache: CacheObject, request_id: str) -> dict[str, Any]:
        body = {
            "model": cache.model,
            "messages": [prefix_message(cache)],
            "max_tokens": 1,
            "temperature": 0,
            "cache_salt": tenant_cache_salt(cache.tenant),
        }
        try:
            response = self.client.post(
                f"{worker.base_url.rstrip('/')}/v1/chat/completions",
                json=body,
                headers=self._headers(request_id, worker),
                timeout=settings.CACHEPLANE_PROVIDER_TIMEOUT_SECONDS,
            )
        except httpx.TransportError as exc:
            raise TransientProviderError(f"worker {worker.name} unreachable: {exc}") from exc
        if response.status_code in (429, 500, 502, 503, 504):
            raise TransientProviderError(
                f"worker {worker.name} answered {response.status_code}: {response.text[:200]}"
            )
        if response.status_code != 200:
            raise PermanentProviderError(
                f"worker {worker.name} rejected the prefix ({response.status_code}): "
                f"{response.text[:300]}",
                code="provider_rejected",
            )
        return response.json().get("usage") or {}

    def _workers(self, cache: CacheObject) -> list[Worker]:
        chosen = placement(cache)
        if not chosen:
            raise TransientProviderError(f"no healthy worker serves {cache.model!r}")
        return chosen

    def _prefill(self, worker: Worker, cache: CacheObject, request_id: str) -> Prefill:
        usage = self._warm(worker, cache, request_id=request_id)
        prompt = int(usage.get("prompt_tokens") or 0)
        # Without ``--enable-prompt-tokens-details`` vLLM reports no details: residency
        # is then unknown (None), not "nothing resident".
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        block = worker.block_size or 16
        return Prefill(
            worker=worker.name,
            pool=worker.pool,
            request_id=request_id,
            prompt_tokens=prompt,
            cached_tokens=int(cached or 0) if isinstance(details, dict) else None,
            output_tokens=int(usage.get("completion_tokens") or 0),
            resident_full=max(prompt - 1, 0) // block * block,
        )

    def _sent(self, cache: CacheObject, kind: str) -> RemoteState:
        chosen = self._workers(cache)
        prefills = [self._prefill(w, cache, f"cp-{kind}-{cache.pk}-{w.name}") for w in chosen]
        tokens = next((p.prompt_tokens for p in prefills if p.prompt_tokens), cache.token_count)
        return RemoteState(
            placement=[w.name for w in chosen],
            token_count=tokens,
            cached_tokens=min(
                (p.cached_tokens for p in prefills if p.cached_tokens is not None), default=None
            ),
            pool=chosen[0].pool,
            prefills=prefills,
        )

    def create(self, cache: CacheObject, *, retry: bool = False) -> RemoteState:
        # Warming is a request: a retry simply warms again.
        return self._sent(cache, "warm")

    def refresh(self, cache: CacheObject, *, ttl_seconds: int) -> RemoteState:
        """Probe (and re-warm on a miss) on the current placement, replacing dead workers.

        The probe's cached tokens are the residency: fewer than the prefix's full blocks
        on a worker means that worker evicted (part of) the pinned prefix since the last
        pin; the probe has just recomputed it.
        """
        return self._sent(cache, "probe")

    def evict(self, cache: CacheObject) -> None:
        return None  # unpinning is the state change itself (see the module docstring)
