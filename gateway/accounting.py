"""Closing a request's books: usage from the worker's answer, budget settle, metering."""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import sync_to_async

from gateway import budget
from gateway.metering import Meter, meter_finish


def meter_usage(meter: Meter, usage: dict[str, Any]) -> None:
    meter.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    meter.output_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    meter.cached_tokens = int(details.get("cached_tokens") or 0)


async def finish(meter: Meter, reservation) -> None:  # noqa: ANN001
    if meter.latency_ms is None:
        meter.latency_ms = int((time.perf_counter() - meter.started) * 1000)
    await budget.settle(reservation, meter)
    await sync_to_async(meter_finish, thread_sensitive=False)(meter)
