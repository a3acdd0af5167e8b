"""Input and output shapes of the platform worker API (the API key is write-only)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from workers.hash_config import worker_hash_spec
from workers.models import Worker
from workers.services import ENGINES

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class WorkerRegisterInput(serializers.Serializer[None]):
    name = serializers.RegexField(_NAME, max_length=100)
    base_url = serializers.URLField(max_length=300)
    model = serializers.CharField(max_length=200)
    pool = serializers.RegexField(_NAME, max_length=100, required=False, default="default")
    engine = serializers.ChoiceField(choices=ENGINES, required=False, default="reference")
    engine_version = serializers.CharField(
        max_length=40, required=False, allow_blank=True, default=""
    )
    kv_events_endpoint = serializers.CharField(
        max_length=200, required=False, allow_blank=True, default=""
    )
    hash_seed = serializers.CharField(max_length=64, required=False, allow_blank=True, default="0")
    tokenizer = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    api_key = serializers.CharField(
        max_length=500, required=False, allow_blank=True, write_only=True, trim_whitespace=False
    )
    dev_mode = serializers.BooleanField(required=False, default=False)


class WorkerOut(serializers.ModelSerializer[Worker]):
    has_api_key = serializers.SerializerMethodField()
    routing = serializers.SerializerMethodField()

    class Meta:
        model = Worker
        fields = [
            "id",
            "name",
            "pool",
            "base_url",
            "model",
            "engine",
            "engine_version",
            "state",
            "block_size",
            "num_blocks",
            "dev_mode",
            "kv_events_endpoint",
            "hash_algo",
            "hash_seed",
            "tokenizer",
            "has_api_key",
            "routing",
            "last_seen_at",
        ]

    def get_has_api_key(self, worker: Worker) -> bool:
        return bool(worker.api_key_sealed)

    def get_routing(self, worker: Worker) -> dict[str, Any]:
        """``{"mode": "exact"|"approximate", "reason": ...}`` (workers.hash_config)."""
        spec, reason = worker_hash_spec(worker)
        return {"mode": "exact" if spec else "approximate", "reason": reason}
