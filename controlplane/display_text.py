"""The one rule for free text a tenant can set and the console displays (names, titles).

Templates escape everything, and the CSP forbids inline script, so markup in a name could
not run anyway; refusing it at the API as well keeps stored data clean for every other
consumer (exports, webhooks, third-party dashboards) that may render it less carefully.
Rule: no control characters (Unicode category ``Cc``, which includes newlines and tabs)
and no angle brackets. Error code ``unsafe_text``.
"""

from __future__ import annotations

import unicodedata

from django.core.exceptions import ValidationError

UNSAFE_TEXT_CODE = "unsafe_text"


def display_text_validator(value: str) -> None:
    """Raise ``ValidationError(code="unsafe_text")`` for control characters or ``<``/``>``."""
    for ch in value:
        if ch in "<>" or unicodedata.category(ch) == "Cc":
            raise ValidationError(
                "Use no angle brackets (< >) and no control characters here.",
                code=UNSAFE_TEXT_CODE,
            )
