"""Money units and exact rounding: nano-USD, micro-USD, rates scaled to integers.

Every amount is an ``int``; a rate (USD per 1M tokens, at most 6 decimals) becomes an exact
integer by ``scaled``, and every division rounds once, half-even (see ``billing.pricing``).
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

ZERO = Decimal(0)
SECONDS_PER_HOUR = Decimal(3600)
MICROS_PER_USD = 1_000_000
NANOS_PER_USD = 1_000_000_000
NANOS_PER_MICRO = 1_000
SCALE = 10**6  # rates carry at most 6 decimal places


def round_micros(value: Decimal) -> int:
    """Round an exact micro-USD amount half-even to an integer."""
    return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))


def div_half_even(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded half-even, exactly (any sign, denominator > 0)."""
    quotient, remainder = divmod(numerator, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2):
        quotient += 1
    return quotient


def nanos_to_micros(nanos: int) -> int:
    """The µ$ figure of an exact nano amount: one half-even rounding of the total."""
    return div_half_even(nanos, NANOS_PER_MICRO)


def scaled(rate: Decimal) -> int:
    """``rate × 10^6`` as an exact integer (rates have at most 6 decimal places)."""
    value = rate.scaleb(6)
    if value != value.to_integral_value():
        raise ValueError(f"rate {rate} has more than 6 decimal places")
    return int(value)


def line_nanos(tokens: int, rate_per_mtok: Decimal, *, keep_percent: int = 100) -> int:
    """Cost of ``tokens`` at ``rate_per_mtok`` USD per 1M tokens, in nano-USD.

    ``tokens × rate / 10^6 USD × 10^9 n$/USD = tokens × scaled(rate) / 10^3``; a
    discount keeps ``keep_percent`` % of it, in the same single rounding.
    """
    return div_half_even(tokens * scaled(rate_per_mtok) * keep_percent, 1000 * 100)


def micro_seconds(seconds: Decimal) -> int:
    """``seconds`` as whole microseconds, half-even (durations are priced at µs precision)."""
    return int(seconds.scaleb(6).to_integral_value(rounding=ROUND_HALF_EVEN))


def micros_ceil(nanos: int) -> int:
    """Nanos to µ$ rounded up (a reservation must not be below the cost it bounds)."""
    return -(-nanos // NANOS_PER_MICRO)
