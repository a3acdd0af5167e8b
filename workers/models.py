"""Registered inference workers (vLLM servers or the reference worker)."""

from __future__ import annotations

import uuid

from django.db import models


class WorkerState(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy"
    DRAINING = "draining", "Draining"


class Worker(models.Model):
    """A vLLM-protocol server in a pool, serving one model.

    Workers are shared infrastructure (not tenant-owned); tenants are isolated on them by
    ``cache_salt``. Capacity fields come from the worker's ``vllm:cache_config_info``.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100, unique=True)
    pool = models.CharField(max_length=100, default="default", db_index=True)
    base_url = models.URLField(max_length=300, unique=True)
    model = models.CharField(max_length=200, db_index=True)
    engine = models.CharField(max_length=32, default="reference")
    engine_version = models.CharField(
        max_length=40, blank=True, help_text="What the worker's GET /version answered."
    )
    state = models.CharField(
        max_length=16, choices=WorkerState.choices, default=WorkerState.HEALTHY, db_index=True
    )
    block_size = models.PositiveIntegerField(default=16)
    num_blocks = models.PositiveIntegerField(null=True, blank=True)
    kv_bytes_per_token = models.PositiveIntegerField(null=True, blank=True)
    dev_mode = models.BooleanField(
        default=False, help_text="Dev-mode endpoints (/reset_prefix_cache) are available."
    )
    kv_events_endpoint = models.CharField(
        max_length=200,
        blank=True,
        help_text="PUB[,REPLAY] as the worker binds them (tcp://*:5557,tcp://*:5558).",
    )
    # How the worker hashes prefix-cache blocks (workers.hash_config): the algorithm is
    # read from its cache_config_info; the seed is its PYTHONHASHSEED, configuration that
    # no endpoint reports ("" = unknown: vLLM then seeds from random bytes).
    hash_algo = models.CharField(max_length=32, blank=True)
    hash_seed = models.CharField(max_length=64, blank=True, default="0")
    tokenizer = models.CharField(
        max_length=500,
        blank=True,
        help_text="Model directory or tokenizer.json the gateway hashes prompts with.",
    )
    api_key_sealed = models.TextField(
        blank=True, editable=False, help_text="The worker's --api-key, sealed (never shown)."
    )
    metrics = models.JSONField(default=dict, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pool", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"


class WorkerKvSample(models.Model):
    """KV cache usage of one worker over one minute: the max and the sum of its probes.

    Written by the periodic probe (``workers.kv_pressure.worker_kv_sample_record``, an
    upsert per worker per minute) and read by the workers page's 1 h / 24 h / 7 d chart;
    rows older than ``workers.kv_pressure.RETENTION`` are pruned by the same probe. Keyed
    by worker name, not a foreign key, so the history outlives a removed worker.
    """

    worker_name = models.CharField(max_length=100)
    bucket = models.DateTimeField()
    usage_max = models.FloatField()
    usage_sum = models.FloatField()
    samples = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["worker_name", "bucket"], name="workerkv_one_per_minute"
            )
        ]
        indexes = [models.Index(fields=["bucket"])]

    def __str__(self) -> str:
        return f"{self.worker_name}@{self.bucket:%Y-%m-%d %H:%M} max {self.usage_max:.2f}"
