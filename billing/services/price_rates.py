"""Validating price-book rates before a version is written: every rate a ``Decimal`` of at
most 6 places within a sane range, long-context tiers complete, discount windows well formed.

Raises ``InvalidPrice`` naming the field; nothing here touches the database.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from billing.errors import InvalidPrice
from billing.models import ModelPrice
from billing.pricing import LONG_BASES, LONG_BASIS_PROMPT, DiscountWindow

MODEL_RATE_FIELDS = (
    "input_per_mtok",
    "cached_input_per_mtok",
    "cache_write_5m_per_mtok",
    "cache_write_1h_per_mtok",
    "storage_per_mtok_hour",
    "output_per_mtok",
)
MODEL_LONG_FIELDS = (
    "long_input_per_mtok",
    "long_cached_input_per_mtok",
    "long_cache_write_5m_per_mtok",
    "long_cache_write_1h_per_mtok",
    "long_output_per_mtok",
    "long_storage_per_mtok_hour",
)
MODEL_OPTIONAL_FIELDS = (
    "thinking_per_mtok",
    "audio_input_per_mtok",
    "audio_cached_input_per_mtok",
    "audio_output_per_mtok",
)
MODEL_ALL_FIELDS = (
    *MODEL_RATE_FIELDS,
    "long_threshold_tokens",
    "long_threshold_basis",
    *MODEL_LONG_FIELDS,
    *MODEL_OPTIONAL_FIELDS,
    "time_discounts",
)
MAX_DISCOUNT_WINDOWS = 4
POOL_FIELDS = (
    "gpu_hour_usd",
    "prefill_tokens_per_gpu_second",
    "decode_tokens_per_gpu_second",
    "kv_blocks_per_gpu",
    "kv_block_tokens",
)
MAX_RATE = Decimal("1000000")  # USD per 1M tokens; anything above is a typo


def _decimal(name: str, value: Any, *, positive: bool = False, places: int = 6) -> Decimal:
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        raise InvalidPrice(f"{name} is not a number.", details={"field": name}) from None
    if not number.is_finite():
        raise InvalidPrice(f"{name} must be finite.", details={"field": name})
    if number < 0 or (positive and number == 0):
        raise InvalidPrice(
            f"{name} must be {'positive' if positive else 'zero or more'}.",
            details={"field": name, "value": str(number)},
        )
    if number > MAX_RATE:
        raise InvalidPrice(f"{name} is implausibly large.", details={"field": name})
    if number != number.quantize(Decimal(1).scaleb(-places)):
        raise InvalidPrice(
            f"{name} has more than {places} decimal places.", details={"field": name}
        )
    return number


def model_rates_clean(rates: dict[str, Any]) -> dict[str, Any]:
    """Validate and complete a model price's rates.

    ``input_per_mtok``, ``cached_input_per_mtok`` and ``output_per_mtok`` are required;
    cache writes default to the input rate (no write premium: Vertex, OpenAI before
    GPT-5.6), storage to zero. With ``long_threshold_tokens`` the long-tier input, cached
    input and output rates are required, long-tier writes default to the long input rate
    (long storage to the base storage rate). Thinking and audio rates are optional (null:
    the text rate of the same line); ``long_threshold_basis`` says which tokens count
    towards the threshold (``prompt`` or ``uncached_prompt``); ``time_discounts`` are
    daily UTC windows ``{"start": "HH:MM", "end": "HH:MM", "percent": 1..100}``.
    """
    unknown = sorted(set(rates) - set(MODEL_ALL_FIELDS))
    if unknown:
        raise InvalidPrice(
            f"Unknown rate fields: {', '.join(unknown)}.", details={"fields": unknown}
        )
    clean: dict[str, Any] = {}
    for name in ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok"):
        if rates.get(name) is None:
            raise InvalidPrice(f"{name} is required.", details={"field": name})
        clean[name] = _decimal(name, rates[name])
    for name in ("cache_write_5m_per_mtok", "cache_write_1h_per_mtok"):
        raw = rates.get(name)
        clean[name] = clean["input_per_mtok"] if raw is None else _decimal(name, raw)
    raw_storage = rates.get("storage_per_mtok_hour")
    clean["storage_per_mtok_hour"] = (
        Decimal(0) if raw_storage is None else _decimal("storage_per_mtok_hour", raw_storage)
    )
    for name in MODEL_OPTIONAL_FIELDS:
        raw = rates.get(name)
        clean[name] = None if raw is None else _decimal(name, raw)
    clean["time_discounts"] = _discounts_clean(rates.get("time_discounts"))
    basis = rates.get("long_threshold_basis") or LONG_BASIS_PROMPT
    if basis not in LONG_BASES:
        raise InvalidPrice(
            f"long_threshold_basis must be one of {', '.join(LONG_BASES)}.",
            details={"field": "long_threshold_basis"},
        )
    clean["long_threshold_basis"] = basis
    threshold = rates.get("long_threshold_tokens")
    if threshold is None:
        if any(rates.get(name) is not None for name in MODEL_LONG_FIELDS):
            raise InvalidPrice("Long-tier rates need long_threshold_tokens.")
        clean.update(dict.fromkeys(("long_threshold_tokens", *MODEL_LONG_FIELDS)))
        return clean
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold <= 0:
        raise InvalidPrice("long_threshold_tokens must be a positive integer.")
    clean["long_threshold_tokens"] = threshold
    for name in ("long_input_per_mtok", "long_cached_input_per_mtok", "long_output_per_mtok"):
        if rates.get(name) is None:
            raise InvalidPrice(f"{name} is required with a long tier.", details={"field": name})
        clean[name] = _decimal(name, rates[name])
    for name in ("long_cache_write_5m_per_mtok", "long_cache_write_1h_per_mtok"):
        raw = rates.get(name)
        clean[name] = clean["long_input_per_mtok"] if raw is None else _decimal(name, raw)
    raw = rates.get("long_storage_per_mtok_hour")
    clean["long_storage_per_mtok_hour"] = (
        None if raw is None else _decimal("long_storage_per_mtok_hour", raw)
    )
    return clean


def _discounts_clean(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_DISCOUNT_WINDOWS:
        raise InvalidPrice(
            f"time_discounts must be a list of at most {MAX_DISCOUNT_WINDOWS} windows.",
            details={"field": "time_discounts"},
        )
    windows = []
    for item in raw:
        if not isinstance(item, dict) or set(item) - {"start", "end", "percent", "rates"}:
            raise InvalidPrice(
                "A discount window is {start, end, percent, rates}.",
                details={"field": "time_discounts"},
            )
        try:
            windows.append(DiscountWindow.parse(item).to_dict())
        except ValueError as exc:
            raise InvalidPrice(
                f"Bad discount window: {exc}.", details={"field": "time_discounts"}
            ) from None
    return windows


def model_rates_merge(*, price: ModelPrice, changes: dict[str, Any]) -> dict[str, Any]:
    """A correction's complete rates: the version's own values with only ``changes`` applied.

    A partial correction (say, a new output rate) must not zero the storage rate or drop
    the long tier it did not mention. Setting ``long_threshold_tokens`` to null removes
    the long tier (and its rates, unless given in the same correction).
    """
    merged = {name: getattr(price, name) for name in MODEL_ALL_FIELDS}
    if "long_threshold_tokens" in changes and changes["long_threshold_tokens"] is None:
        merged.update(dict.fromkeys(MODEL_LONG_FIELDS))
    merged.update(changes)
    return merged


def pool_rates_clean(rates: dict[str, Any]) -> dict[str, Any]:
    """Validate a pool price: a GPU-hour price and positive throughput assumptions."""
    clean: dict[str, Any] = {}
    for name in POOL_FIELDS:
        if rates.get(name) is None and name != "kv_block_tokens":
            raise InvalidPrice(f"{name} is required.", details={"field": name})
    clean["gpu_hour_usd"] = _decimal("gpu_hour_usd", rates["gpu_hour_usd"])
    for name in ("prefill_tokens_per_gpu_second", "decode_tokens_per_gpu_second"):
        clean[name] = _decimal(name, rates[name], positive=True, places=3)
    for name, default in (("kv_blocks_per_gpu", None), ("kv_block_tokens", 16)):
        value = rates.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InvalidPrice(f"{name} must be a positive integer.", details={"field": name})
        clean[name] = value
    return clean
