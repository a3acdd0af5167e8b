"""Quotes: what the flush will book for a request's counts, and the true upper bound a
budget reservation holds before the request runs.

Both resolve the price in force at the request's start, so a quote and the ledger agree.
"""

from __future__ import annotations

from datetime import datetime

from billing.errors import PriceNotFound
from billing.models import Provider
from billing.pricing import (
    Cost,
    UsageCounts,
    gpu_cost,
    micros_ceil,
    request_cost_upper_bound,
    token_cost,
)
from billing.selectors.prices import (
    model_price_resolve,
    pool_price_resolve,
    pool_rates,
    token_rates,
)


def usage_cost_quote(
    *, provider: str, model: str, counts: UsageCounts, at: datetime, pool: str = ""
) -> Cost:
    """The cost the flush will book for these counts at ``at`` (for ``budget_settle``).

    Takes any counts, partial ones included (an aborted stream's prompt and what was
    streamed before the end). Raises PriceNotFound when no price covers it.
    """
    if provider == Provider.VLLM:
        pool_price = pool_price_resolve(pool=pool, at=at)
        if pool_price is None:
            raise PriceNotFound(f"No GPU price for pool {pool!r}.")
        return gpu_cost(counts, pool_rates(pool_price))
    price = model_price_resolve(provider=provider, model=model, at=at)
    if price is None:
        raise PriceNotFound(f"No price for {provider}:{model}.")
    return token_cost(counts, token_rates(price), at)


def usage_estimate_micros(
    *,
    provider: str,
    model: str,
    prompt_tokens: int,
    max_output_tokens: int,
    at: datetime,
    pool: str = "",
    cache_tokens: int = 0,
) -> int:
    """A true upper bound of a request's cost before it runs, in µ$ rounded up.

    See ``billing.pricing.request_cost_upper_bound``: ``cache_tokens`` are the tokens a
    referenced cache adds on the provider's side, ``max_output_tokens`` the request's
    ``max_tokens`` or the model's maximum output when the request sets none.
    """
    if provider == Provider.VLLM:
        return micros_ceil(
            usage_cost_quote(
                provider=provider,
                model=model,
                pool=pool,
                at=at,
                counts=UsageCounts(prompt_tokens=prompt_tokens, output_tokens=max_output_tokens),
            ).nanos
        )
    price = model_price_resolve(provider=provider, model=model, at=at)
    if price is None:
        raise PriceNotFound(f"No price for {provider}:{model}.")
    bound = request_cost_upper_bound(
        rates=token_rates(price),
        prompt_tokens=prompt_tokens,
        max_output_tokens=max_output_tokens,
        cache_tokens=cache_tokens,
    )
    return micros_ceil(bound.nanos)
