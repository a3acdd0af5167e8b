"""Rate-limit and provider-credential API shapes (input and output separate; ``tenant``
never writable; a provider key is write-only: no output shape has a field for it)."""

from __future__ import annotations

from rest_framework import serializers

from gateway.models import ProviderCredential, RateLimit
from gateway.provider_credentials import MAX_SECRET_CHARS
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


class ProviderCredentialOut(serializers.ModelSerializer[ProviderCredential]):
    # A plain string in the schema: a second "provider" enum would rename billing's
    # ``ProviderEnum`` component (a breaking change for generated clients).
    provider = serializers.CharField(read_only=True, help_text="anthropic, openai or deepseek.")
    rotated_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When the current key replaced an earlier one; null: never rotated.",
    )

    class Meta:
        model = ProviderCredential
        # Never ``secret_sealed``: the key leaves only towards its provider.
        fields = [
            "provider",
            "fingerprint",
            "cache_autopilot",
            "created_at",
            "rotated_at",
            "updated_at",
        ]
        read_only_fields = fields


class ProviderCredentialSetInput(serializers.Serializer[None]):
    # Length and characters are checked by the service (one rule for every entry point);
    # this bound only keeps a huge body out of it.
    api_key = serializers.CharField(
        write_only=True,
        trim_whitespace=False,
        max_length=MAX_SECRET_CHARS,
        help_text="The provider's API key (8-512 printable characters, no spaces). "
        "Never returned; a second PUT rotates it.",
    )
    cache_autopilot = serializers.BooleanField(
        required=False,
        help_text="Omitted: unchanged (true for a new key).",
    )


class ProviderCredentialUpdateInput(serializers.Serializer[None]):
    cache_autopilot = serializers.BooleanField(
        help_text="Whether the gateway places cache breakpoints (Anthropic) or sets "
        "prompt_cache_key (OpenAI) for this tenant and provider.",
    )
