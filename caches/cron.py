"""Pre-warm schedules: cron expressions (5 fields), validated and stepped with croniter.

A leaf module (no services, no tasks) so that the services that validate a schedule, the
scheduler that steps it and the operation executor can all import it without importing
each other.
"""

from __future__ import annotations

from datetime import datetime

from croniter import croniter
from django.utils import timezone

from caches.errors import InvalidCron


def validate_cron(expression: str) -> str:
    """``expression`` unchanged when empty or valid; raises InvalidCron (``invalid_cron``)."""
    if expression and not croniter.is_valid(expression):
        raise InvalidCron(
            f"{expression!r} is not a valid cron expression (5 fields: m h dom mon dow).",
            details={"cron": expression},
        )
    return expression


def next_cron_time(expression: str, after: datetime | None = None) -> datetime | None:
    """The first time after ``after`` (default: now) that ``expression`` names; None if empty."""
    if not expression:
        return None
    return croniter(expression, after or timezone.now()).get_next(datetime)
