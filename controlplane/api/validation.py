"""Input validation shared by every API view."""

from __future__ import annotations

from typing import Any


def validated(serializer_class: type, data: Any) -> dict:
    """Run an input serializer; a bad body raises DRF's ValidationError (400 invalid_input)."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
