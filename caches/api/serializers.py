"""Input and output shapes of the cache API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from caches.models import CacheObject, CacheOperation, CacheTransition, Provider, TtlPolicy


class ToolInput(serializers.Serializer[None]):
    name = serializers.RegexField(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    description = serializers.CharField(max_length=4000, required=False, allow_blank=True)
    parameters = serializers.DictField(required=False)


class DocumentInput(serializers.Serializer[None]):
    id = serializers.CharField(max_length=200)
    chunk = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False, default=0)
    text = serializers.CharField(required=False, allow_blank=False, trim_whitespace=False)
    uri = serializers.RegexField(r"^gs://.+", max_length=1000, required=False)
    mime_type = serializers.CharField(max_length=100, required=False)
    etag = serializers.CharField(max_length=200, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("text" in attrs) == ("uri" in attrs):
            raise serializers.ValidationError("Give exactly one of text or uri.")
        return attrs


class ContentInput(serializers.Serializer[None]):
    system_instruction = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False
    )
    # many=True makes a ListSerializer, which takes max_length; the stubs' __init__ lacks it.
    tools = ToolInput(many=True, required=False, max_length=512)  # type: ignore[call-arg]
    documents = DocumentInput(many=True, required=False, max_length=10_000)  # type: ignore[call-arg]


class CacheCreateInput(serializers.Serializer[None]):
    name = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    provider = serializers.ChoiceField(choices=Provider.choices)
    model = serializers.CharField(max_length=200)
    content = ContentInput()
    ttl_seconds = serializers.IntegerField(required=False)
    ttl_policy = serializers.ChoiceField(
        choices=TtlPolicy.choices, required=False, default=TtlPolicy.FIXED
    )
    replication_factor = serializers.IntegerField(
        required=False, default=1, min_value=1, max_value=8
    )
    prewarm_cron = serializers.CharField(
        required=False, allow_blank=True, max_length=100, default=""
    )


class CacheExtendInput(serializers.Serializer[None]):
    ttl_seconds = serializers.IntegerField()


class CachePolicyInput(serializers.Serializer[None]):
    ttl_policy = serializers.ChoiceField(choices=TtlPolicy.choices)
    ttl_seconds = serializers.IntegerField(required=False)
    prewarm_cron = serializers.CharField(required=False, allow_blank=True, max_length=100)


class LintInput(serializers.Serializer[None]):
    content = ContentInput()


class LintFindingOut(serializers.Serializer[dict[str, Any]]):
    kind = serializers.CharField()
    location = serializers.CharField()
    snippet = serializers.CharField()
    advice = serializers.CharField()


class LintOut(serializers.Serializer[dict[str, Any]]):
    findings = LintFindingOut(many=True)
    content_digest = serializers.CharField()


class CacheOut(serializers.ModelSerializer[CacheObject]):
    class Meta:
        model = CacheObject
        fields = [
            "id",
            "name",
            "provider",
            "model",
            "content_digest",
            "token_count",
            "ttl_policy",
            "ttl_seconds",
            "expire_at",
            "state",
            "state_changed_at",
            "last_error",
            "last_error_code",
            "remote_name",
            "placement",
            "replication_factor",
            "prewarm_cron",
            "next_prewarm_at",
            "hit_count",
            "hit_tokens",
            "last_hit_at",
            "created_at",
            "activated_at",
            "ended_at",
        ]
        read_only_fields = fields


class CacheDetailOut(CacheOut):
    class Meta(CacheOut.Meta):
        fields = [*CacheOut.Meta.fields, "content"]
        read_only_fields = fields


class OperationOut(serializers.ModelSerializer[CacheOperation]):
    cache = serializers.UUIDField(source="cache_id")

    class Meta:
        model = CacheOperation
        fields = [
            "id",
            "cache",
            "kind",
            "status",
            "attempts",
            "error",
            "error_code",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class TransitionOut(serializers.ModelSerializer[CacheTransition]):
    class Meta:
        model = CacheTransition
        fields = ["from_state", "to_state", "reason", "at"]
        read_only_fields = fields
