"""Input validation shared by every API view."""

from __future__ import annotations

from typing import Any

from rest_framework.serializers import BaseSerializer


def validated(serializer_class: type[BaseSerializer[Any]], data: Any) -> dict[str, Any]:
    """Run an input serializer; a bad body raises DRF's ValidationError (400 invalid_input)."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    clean: dict[str, Any] = serializer.validated_data
    return clean
