"""Moved to ``controlplane.live.usage`` (the neutral live-events module).

Kept so console code written against the old path keeps importing; domain apps must
import ``controlplane.live.usage``.
"""

from controlplane.live.usage import TICK_SECONDS, UsageDelta, UsageTicker, usage_ticker

__all__ = ["TICK_SECONDS", "UsageDelta", "UsageTicker", "usage_ticker"]
