"""Rate-limit API shapes (input and output separate; ``tenant`` never writable)."""

from __future__ import annotations

from rest_framework import serializers

from gateway.models import RateLimit
from gateway.services import INT4_MAX, MAX_LIMIT

_LIMIT_HELP = "Null: unlimited."


class RateLimitOut(serializers.ModelSerializer[RateLimit]):
    api_key = serializers.UUIDField(source="api_key_id", allow_null=True, read_only=True)

    class Meta:
        model = RateLimit
        fields = [
            "id",
            "api_key",
            "requests_per_minute",
            "tokens_per_minute",
            "concurrent_requests",
            "weight",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class RateLimitUpdateInput(serializers.Serializer[None]):
    requests_per_minute = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=INT4_MAX, help_text=_LIMIT_HELP
    )
    tokens_per_minute = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_LIMIT, help_text=_LIMIT_HELP
    )
    concurrent_requests = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=INT4_MAX, help_text=_LIMIT_HELP
    )
    weight = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=1000,
        help_text="Fair-share weight of the tenant under contention (tenant-wide row only).",
    )


class RateLimitCreateInput(RateLimitUpdateInput):
    api_key = serializers.UUIDField(
        required=False,
        allow_null=True,
        help_text="An API key of this tenant; omitted or null: the tenant-wide limit.",
    )
