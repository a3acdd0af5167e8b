"""The price step: an upper bound of a request's cost before it runs, its cost after.

Prices come from billing's price book (``billing.selectors.prices``) and are cached per
(provider, model, pool) for ``RATES_CACHE_SECONDS``, emptied at once when a price changes
(billing publishes on ``PRICES_CHANNEL`` after commit; each gateway process listens); the
arithmetic is billing's (``billing.pricing``), so the hold, the settlement and the ledger
agree to the µ$. Priced after routing: a vLLM request's price is its pool's, known once a worker is
chosen.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

from cachetools import TTLCache

from billing.pricing import Cost, UsageCounts, gpu_cost, token_cost
from controlplane.db import db_sync_to_async
from controlplane.loop_local import LoopLocal
from controlplane.redis import keys

logger = logging.getLogger(__name__)
RATES_CACHE_SECONDS = 60.0
PRICES_CHANNEL = keys.prices_changed_channel()  # billing.services.prices publishes here
Rates = tuple[Callable[[UsageCounts, Any], Cost], Any]


class _Missing(enum.Enum):
    """A cache miss (None is a cached answer: no price); an enum so `is` narrows the type."""

    MISSING = enum.auto()


_MISSING = _Missing.MISSING
# Read from the event loop and from metering threads: guarded by _lock.
_rates: TTLCache[tuple[str, str, str], Rates | None] = TTLCache(
    maxsize=10_000, ttl=RATES_CACHE_SECONDS
)
_lock = threading.Lock()


def rates_cached(provider: str, model: str, pool: str) -> Rates | None:
    """(cost function, rates) of the price in force now, cached (None: no price); sync."""
    key = (provider, model, pool)
    cached: Rates | None | Literal[_Missing.MISSING]
    with _lock:
        cached = _rates.get(key, _MISSING)
    if cached is not _MISSING:
        return cached
    from billing.selectors.prices import (
        model_price_resolve,
        pool_price_resolve,
        pool_rates,
        token_rates,
    )

    now = datetime.now(tz=UTC)
    value: Rates | None
    if provider == "vllm":
        price = pool_price_resolve(pool=pool, at=now) if pool else None
        value = (gpu_cost, pool_rates(price)) if price is not None else None
    else:
        found = model_price_resolve(provider=provider, model=model, at=now)
        value = (token_cost, token_rates(found)) if found is not None else None
    with _lock:
        _rates[key] = value
    return value


# Each loop's running listener (a set, empty once the task ends): the task is discarded
# when it finishes, so nothing here keeps a closed loop alive.
_listeners: LoopLocal[set[asyncio.Task[None]]] = LoopLocal(set)


def _listen_for_changes() -> None:
    """Start (once per event loop) the task that empties the cache on a price change."""
    try:
        running = _listeners.get()
    except RuntimeError:  # no running loop: the TTL bounds staleness
        return
    if running:
        return
    task = asyncio.get_running_loop().create_task(_listen())
    running.add(task)
    task.add_done_callback(running.discard)


async def _listen() -> None:
    from controlplane.redis.clients import async_client

    while True:
        try:
            async with async_client().pubsub() as pubsub:
                await pubsub.subscribe(PRICES_CHANNEL)
                forget()  # whatever changed while this process was not subscribed
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        forget()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("price change listener lost its connection; retrying")
            forget()
            await asyncio.sleep(1.0)


async def rates(provider: str, model: str, pool: str) -> Rates | None:
    """:func:`rates_cached` without blocking the loop on a cache miss."""
    _listen_for_changes()
    cached: Rates | None | Literal[_Missing.MISSING]
    with _lock:
        cached = _rates.get((provider, model, pool), _MISSING)
    if cached is not _MISSING:
        return cached
    return await db_sync_to_async(rates_cached)(provider, model, pool)


def forget() -> None:
    with _lock:
        _rates.clear()


def output_may_be_audio(body: dict[str, Any]) -> bool:
    """Whether the request asks for spoken output (``modalities: ["text", "audio"]`` or
    ``audio: {...}``): its output may be billed at the audio output rate, far above the
    text rate (gpt-4o-audio-preview: $80 vs $10 per 1M tokens)."""
    modalities = body.get("modalities") or ()
    if isinstance(modalities, list | tuple) and any(
        isinstance(modality, str) and modality.lower() == "audio" for modality in modalities
    ):
        return True
    return body.get("audio") is not None


def upper_bound_micros(
    found: Rates,
    *,
    prompt_tokens: int,
    max_output_tokens: int,
    audio_output: bool = False,
    audio_prompt_tokens: int = 0,
) -> int:
    """The most this request can cost: every prompt token at the dearest input-side rate
    (plain, or written to a cache) of the tier its size selects, plus every output token
    it may generate at the dearest output rate it may be billed at (audio, when
    ``audio_output``: the request asks for spoken output). ``prompt_tokens`` must itself
    be an upper bound (cache included); ``audio_prompt_tokens``, the bound of its audio
    part, may be billed at the audio input rate (dearer than text on OpenAI's audio
    models)."""
    cost_fn, rates_ = found
    if cost_fn is gpu_cost:
        return gpu_cost(
            UsageCounts(prompt_tokens=prompt_tokens, output_tokens=max_output_tokens), rates_
        ).micros
    shapes: tuple[UsageCounts, ...] = (
        UsageCounts(prompt_tokens=prompt_tokens, output_tokens=max_output_tokens),
        UsageCounts(
            prompt_tokens=prompt_tokens,
            cache_write_5m_tokens=prompt_tokens,
            output_tokens=max_output_tokens,
        ),
        UsageCounts(
            prompt_tokens=prompt_tokens,
            cache_write_1h_tokens=prompt_tokens,
            output_tokens=max_output_tokens,
        ),
        UsageCounts(
            prompt_tokens=prompt_tokens,
            cached_read_tokens=prompt_tokens,
            output_tokens=max_output_tokens,
        ),
    )
    audio = min(audio_prompt_tokens, prompt_tokens)
    if audio > 0:  # the audio part at the audio input rate, read from a cache or not
        shapes += (
            UsageCounts(
                prompt_tokens=prompt_tokens,
                audio_prompt_tokens=audio,
                output_tokens=max_output_tokens,
            ),
            UsageCounts(
                prompt_tokens=prompt_tokens,
                cached_read_tokens=prompt_tokens,
                audio_prompt_tokens=audio,
                audio_cached_read_tokens=audio,
                output_tokens=max_output_tokens,
            ),
        )
    cost, dearest = max(
        ((token_cost(shape, rates_), shape) for shape in shapes), key=lambda pair: pair[0].nanos
    )
    if not audio_output:
        return cost.micros
    # The same token totals (so the same tier): only the output line's rate differs.
    spoken = replace(dearest, output_tokens=0, audio_output_tokens=max_output_tokens)
    return max(cost.micros, token_cost(spoken, rates_).micros)


def cost_micros(found: Rates | None, counts: UsageCounts, at: datetime | None = None) -> int:
    """What these counts cost (0 without a price: the ledger books it when one exists);
    ``at``: when, for a time-of-day discount (DeepSeek's off-peak window)."""
    if found is None:
        return 0
    cost_fn, rates_ = found
    if cost_fn is token_cost:
        return token_cost(counts, rates_, at).micros
    return cost_fn(counts, rates_).micros
