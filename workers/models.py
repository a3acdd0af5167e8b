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
    state = models.CharField(
        max_length=16, choices=WorkerState.choices, default=WorkerState.HEALTHY, db_index=True
    )
    block_size = models.PositiveIntegerField(default=16)
    num_blocks = models.PositiveIntegerField(null=True, blank=True)
    kv_bytes_per_token = models.PositiveIntegerField(null=True, blank=True)
    dev_mode = models.BooleanField(
        default=False, help_text="Dev-mode endpoints (/reset_prefix_cache) are available."
    )
    kv_events_endpoint = models.CharField(max_length=200, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pool", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"
