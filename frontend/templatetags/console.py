"""Template helpers for the console: human timestamps, money, small bits of markup.

Everything returned here is built with ``format_html`` so values stay escaped.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


def _as_datetime(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        return parse_datetime(value)
    return None


def humanize_delta(*, moment: datetime, now: datetime) -> str:
    """ "3 min ago" / "in 2 h" with one unit, the way people read a log."""
    seconds = (moment - now).total_seconds()
    future = seconds > 0
    span = abs(seconds)
    if span < 45:
        return "just now" if not future else "in a few seconds"
    for limit, unit, size in (
        (3600, "min", 60),
        (86400, "h", 3600),
        (86400 * 45, "d", 86400),
        (float("inf"), "mo", 86400 * 30),
    ):
        if span < limit:
            n = max(1, round(span / size))
            return f"in {n} {unit}" if future else f"{n} {unit} ago"
    return ""  # unreachable: the last limit is infinite


@register.filter
def when(value: object) -> SafeString | str:
    """A ``<time>`` with a relative text and the exact UTC time on hover."""
    moment = _as_datetime(value)
    if moment is None:
        return "—"
    exact = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.isoformat(),
        exact,
        humanize_delta(moment=moment, now=timezone.now()),
    )


@register.filter
def usd(value: object, places: int = 2) -> str:
    """Dollars with a fixed number of places (4 for sub-dollar figures by default)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "—"
    if places == 2 and 0 < abs(number) < 1:
        places = 4
    return f"${number:,.{places}f}"


@register.filter
def percent(value: object) -> str:
    try:
        return f"{float(value) * 100:.0f} %"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "—"


@register.filter
def fraction(value: object, total: object) -> float:
    """``value / total`` clamped to [0, 1] for a ``<meter>`` (0 when there is no total)."""
    try:
        t = float(total)  # type: ignore[arg-type]
        return max(0.0, min(1.0, float(value) / t)) if t else 0.0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


@register.filter
def rate(value: object) -> str:
    """A price-book rate without trailing zeros: 1.250000 -> 1.25, 4600.000 -> 4600."""
    from decimal import Decimal, InvalidOperation

    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return "—"
    text = f"{number.normalize():f}"
    return text if "." not in text else text.rstrip("0").rstrip(".")


@register.filter
def error_items(errors: object) -> list[dict[str, str]]:
    """A bound field's (or form's) errors as ``{"message", "code"}``: the message in plain
    words, the stable code only for errors a service raised (``frontend.actions``)."""
    from django.forms.utils import ErrorList

    from frontend.actions import DOMAIN_CODE_PREFIX

    items = []
    for error in errors.as_data() if isinstance(errors, ErrorList) else []:
        code = error.code or ""
        for message in error:
            items.append(
                {
                    "message": str(message),
                    "code": code[len(DOMAIN_CODE_PREFIX) :]
                    if code.startswith(DOMAIN_CODE_PREFIX)
                    else "",
                }
            )
    return items


@register.filter(name="url_redacted")
def url_redacted_filter(value: object) -> str:
    """A webhook URL as a reader without budgets.update sees it (scheme and host)."""
    from controlplane.outbound import url_redacted

    return url_redacted(str(value or ""))
