"""Reading the price book: which version applies at a time, as exact rates.

Prices are platform data (not tenant-owned), so these reads take no tenant.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from datetime import datetime
from typing import TypeVar

from django.db.models import QuerySet

from billing.models import ModelPrice, PoolPrice
from billing.pricing import DiscountWindow, PoolRates, TokenRates

_Price = TypeVar("_Price", ModelPrice, PoolPrice)


def model_price_list(
    *, provider: str | None = None, model: str | None = None, include_superseded: bool = True
) -> QuerySet[ModelPrice]:
    """Every version of the model price book (platform reads), newest first."""
    qs = ModelPrice.objects.all()
    if provider:
        qs = qs.filter(provider=provider)
    if model:
        qs = qs.filter(model=model)
    if not include_superseded:
        qs = qs.filter(superseded_at__isnull=True)
    return qs


def pool_price_list(*, pool: str | None = None) -> QuerySet[PoolPrice]:
    """Every version of the GPU pool price book (platform reads)."""
    qs = PoolPrice.objects.all()
    return qs.filter(pool=pool) if pool else qs


def model_price_resolve(*, provider: str, model: str, at: datetime) -> ModelPrice | None:
    """The live version covering ``at`` for (provider, model), or None."""
    return (
        ModelPrice.objects.filter(
            provider=provider, model=model, superseded_at__isnull=True, effective_from__lte=at
        )
        .exclude(effective_to__lte=at)
        .order_by("-effective_from")
        .first()
    )


DEFAULT_POOL = "default"


def pool_price_resolve(*, pool: str, at: datetime) -> PoolPrice | None:
    """The live GPU price of ``pool`` covering ``at``, or None.

    A pool without a price of its own is charged at the ``default`` pool's price (seeded
    from the ``CACHEPLANE_VLLM_DEFAULT_*`` settings): a self-hosted request never costs
    0 silently. None only when not even the default covers ``at`` (shown as unpriced).
    """

    def resolve(name: str) -> PoolPrice | None:
        return (
            PoolPrice.objects.filter(pool=name, superseded_at__isnull=True, effective_from__lte=at)
            .exclude(effective_to__lte=at)
            .order_by("-effective_from")
            .first()
        )

    found = resolve(pool) if pool else None
    if found is None and pool != DEFAULT_POOL:
        found = resolve(DEFAULT_POOL)
    return found


def token_rates(price: ModelPrice) -> TokenRates:
    """The exact rates of a model price version."""
    return TokenRates(
        input=price.input_per_mtok,
        cached_input=price.cached_input_per_mtok,
        cache_write_5m=price.cache_write_5m_per_mtok,
        cache_write_1h=price.cache_write_1h_per_mtok,
        output=price.output_per_mtok,
        storage_per_hour=price.storage_per_mtok_hour,
        long_threshold=price.long_threshold_tokens,
        long_input=price.long_input_per_mtok,
        long_cached_input=price.long_cached_input_per_mtok,
        long_cache_write_5m=price.long_cache_write_5m_per_mtok,
        long_cache_write_1h=price.long_cache_write_1h_per_mtok,
        long_output=price.long_output_per_mtok,
        long_basis=price.long_threshold_basis,
        long_storage_per_hour=price.long_storage_per_mtok_hour,
        thinking=price.thinking_per_mtok,
        audio_input=price.audio_input_per_mtok,
        audio_cached_input=price.audio_cached_input_per_mtok,
        audio_output=price.audio_output_per_mtok,
        discounts=tuple(DiscountWindow.parse(w) for w in price.time_discounts or ()),
    )


def pool_rates(price: PoolPrice) -> PoolRates:
    return PoolRates(
        gpu_hour_usd=price.gpu_hour_usd,
        prefill_tokens_per_gpu_second=price.prefill_tokens_per_gpu_second,
        decode_tokens_per_gpu_second=price.decode_tokens_per_gpu_second,
        kv_blocks_per_gpu=price.kv_blocks_per_gpu,
        kv_block_tokens=price.kv_block_tokens,
    )


class PriceIndex:
    """Live price versions of a set of keys, resolved in memory by time (batch paths).

    One query per key set instead of one per row: the flush and reprice price thousands
    of rows against a handful of versions.
    """

    def __init__(self, *, models: Iterable[tuple[str, str]] = (), pools: Iterable[str] = ()):
        self._models: dict[tuple[str, str], tuple[list[datetime], list[ModelPrice]]] = {}
        self._pools: dict[str, tuple[list[datetime], list[PoolPrice]]] = {}
        self._rates: dict[int, TokenRates] = {}
        self._pool_rates: dict[int, PoolRates] = {}
        self.load(models=models, pools=pools)

    def load(self, *, models: Iterable[tuple[str, str]] = (), pools: Iterable[str] = ()) -> None:
        """Fetch the keys not loaded yet (two queries at most)."""
        want_models = {k for k in models if k not in self._models}
        want_pools = {p for p in (*pools, DEFAULT_POOL) if p and p not in self._pools}
        if want_models:
            grouped: dict[tuple[str, str], list[ModelPrice]] = {k: [] for k in want_models}
            providers = {p for p, _ in want_models}
            names = {m for _, m in want_models}
            for price in ModelPrice.objects.filter(
                provider__in=providers, model__in=names, superseded_at__isnull=True
            ).order_by("effective_from"):
                key = (price.provider, price.model)
                if key in grouped:
                    grouped[key].append(price)
            for key, versions in grouped.items():
                self._models[key] = ([v.effective_from for v in versions], versions)
        if want_pools:
            grouped_pools: dict[str, list[PoolPrice]] = {p: [] for p in want_pools}
            for pool_price in PoolPrice.objects.filter(
                pool__in=want_pools, superseded_at__isnull=True
            ).order_by("effective_from"):
                grouped_pools[pool_price.pool].append(pool_price)
            for pool, pool_versions in grouped_pools.items():
                self._pools[pool] = ([v.effective_from for v in pool_versions], pool_versions)

    @staticmethod
    def _pick(entry: tuple[list[datetime], list[_Price]] | None, at: datetime) -> _Price | None:
        if not entry:
            return None
        starts, versions = entry
        i = bisect.bisect_right(starts, at) - 1
        if i < 0:
            return None
        version = versions[i]
        if version.effective_to is not None and at >= version.effective_to:
            return None
        return version

    def model_price(self, provider: str, model: str, at: datetime) -> ModelPrice | None:
        return self._pick(self._models.get((provider, model)), at)

    def pool_price(self, pool: str, at: datetime) -> PoolPrice | None:
        """The pool's own price at ``at``, else the default pool's (see pool_price_resolve)."""
        found = self._pick(self._pools.get(pool), at) if pool else None
        if found is None and pool != DEFAULT_POOL:
            found = self._pick(self._pools.get(DEFAULT_POOL), at)
        return found

    def rates(self, price: ModelPrice) -> TokenRates:
        if price.pk not in self._rates:
            self._rates[price.pk] = token_rates(price)
        return self._rates[price.pk]

    def pool_rates(self, price: PoolPrice) -> PoolRates:
        if price.pk not in self._pool_rates:
            self._pool_rates[price.pk] = pool_rates(price)
        return self._pool_rates[price.pk]
