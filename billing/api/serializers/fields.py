"""Fields the billing serializers share: the provider (as a pattern) and a rate."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import Provider


# A pattern, not an enum: drf-spectacular names enums after the field, and the caches
# app's narrower "provider" enum (vertex, vllm) would collide with this one.
@extend_schema_field(
    {
        "type": "string",
        "pattern": "^(" + "|".join(Provider.values) + ")$",
        "description": "One of: " + ", ".join(Provider.values) + " (vllm: self-hosted pools).",
    }
)
class ProviderField(serializers.ChoiceField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=Provider.choices, **kwargs)


def rate_field(**kwargs: Any) -> serializers.DecimalField:
    """A rate in USD per 1M tokens: a decimal string with at most 6 places."""
    return serializers.DecimalField(max_digits=16, decimal_places=6, **kwargs)
