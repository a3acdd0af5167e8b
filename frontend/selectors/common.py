"""Helpers every console read model shares: the month window and micro-dollars → dollars."""

from __future__ import annotations

from datetime import datetime, timedelta


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The calendar month holding ``now``: its first instant and the next month's."""
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def usd(micros: int) -> float:
    """Micro-dollars as dollars for the page (JSON numbers; rounding to the micro-dollar)."""
    return round(micros / 1_000_000, 6)
