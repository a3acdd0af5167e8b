"""Which fields of each audited model an audit row may hold, declared once, per model.

Every concrete field of an audited model is classified (``tests/audit/test_registry.py``
fails when a model gains a field nobody classified):

- ``recorded``: stored as is in before/after (after ``audit.redaction.scrub`` of secrets
  inside the value, such as a token in a webhook URL's query string);
- ``sensitive``: a credential or private payload; the audit row shows only that it was
  set or changed (``"[redacted]"``), never the value;
- ``ignored``: bookkeeping that would only add noise (timestamps Django maintains, the
  primary key, which is the event's ``target_id``, scraped counters).

A field that is in none of the three (a model changed, the registry not yet) is treated
as sensitive at run time: the gap can hide a value, never leak one.

Sensitivity is declared by name here and nowhere else: the audit log never guesses it
from a key's spelling (``content_digest`` and ``kv_block_tokens`` are real data).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models

from billing.pricing.counts import COUNT_FIELDS


@dataclass(frozen=True)
class AuditFields:
    """The classification of one model's concrete fields (by field name)."""

    recorded: frozenset[str]
    sensitive: frozenset[str] = frozenset()
    ignored: frozenset[str] = frozenset()


def _fields(
    recorded: set[str], sensitive: set[str] | None = None, ignored: set[str] | None = None
) -> AuditFields:
    return AuditFields(
        recorded=frozenset(recorded),
        sensitive=frozenset(sensitive or ()),
        ignored=frozenset(ignored or ()),
    )


AUDITED_MODELS: dict[str, AuditFields] = {
    "tenants.Tenant": _fields(
        {"slug", "display_name", "state", "cache_salt_version", "policy_version", "suspended_at"},
        sensitive={"cache_salt_secret"},
        ignored={"id", "created_at", "updated_at"},
    ),
    "tenants.Principal": _fields(
        {
            "username",
            "first_name",
            "last_name",
            "email",
            "kind",
            "tenant",
            "description",
            "is_active",
            "is_staff",
            "is_superuser",
            "removed_at",
        },
        sensitive={"password"},
        ignored={"id", "last_login", "date_joined"},
    ),
    "tenants.Role": _fields(
        {"tenant", "name", "title", "description", "scope", "permissions", "is_predefined"},
        ignored={"id", "created_at"},
    ),
    "tenants.RoleBinding": _fields(
        {"tenant", "principal", "role", "expires_at"},
        ignored={"id", "created_at"},
    ),
    "tenants.ApiKey": _fields(
        {"tenant", "principal", "name", "prefix", "created_by", "expires_at", "revoked_at"},
        # The digest is the key's verifier: no evidential value, and a lookup handle.
        sensitive={"digest"},
        ignored={"id", "created_at", "last_used_at"},
    ),
    "identity.GroupMapping": _fields(
        {"tenant", "group", "role", "created_by"},
        ignored={"id", "created_at"},
    ),
    "identity.ExternalIdentity": _fields(
        {"principal", "issuer", "subject", "groups"},
        ignored={"id", "created_at", "last_login_at"},
    ),
    "identity.ScimGroup": _fields(
        {"display_name", "external_id"},
        ignored={"id", "created_at", "updated_at"},
    ),
    "caches.CacheObject": _fields(
        {
            "tenant",
            "name",
            "provider",
            "model",
            "content_digest",
            "token_count",
            "ttl_policy",
            "ttl_seconds",
            "expire_at",
            "state",
            "last_error",
            "last_error_code",
            "remote_name",
            "vertex_project",
            "vertex_location",
            "placement",
            "replication_factor",
            "prewarm_cron",
            "next_prewarm_at",
            "next_refresh_at",
            "created_by",
            "budget_reservation_id",
            "activated_at",
            "ended_at",
            "pool",
            "evicted_seen_at",
        },
        # The cached prompt itself: the tenant's data, identified by content_digest.
        sensitive={"content"},
        ignored={
            "id",
            "state_changed_at",
            "hit_count",
            "hit_tokens",
            "last_hit_at",
            "query_rate_ewma",
            "created_at",
            "updated_at",
            # Measured by every vLLM pin (like the hit counters), not a change anyone made.
            "resident_tokens",
            "resident_checked_at",
        },
    ),
    "caches.TenantCacheSettings": _fields(
        {"tenant", "vertex_project", "vertex_location", "gcs_bucket_allow_list"},
        # A path on the control plane's host, pointing at a service-account key file.
        sensitive={"vertex_credentials_file"},
        ignored={"updated_at"},
    ),
    "billing.Budget": _fields(
        {
            "tenant",
            "principal",
            "name",
            "period",
            "starts_at",
            "ends_at",
            "limit_micros",
            "thresholds",
            "hard_limit",
            "webhook_url",
            "created_by",
            "archived_at",
        },
        sensitive={"webhook_secret"},
        ignored={"id", "created_at", "updated_at"},
    ),
    "billing.ModelPrice": _fields(
        {
            "provider",
            "model",
            "input_per_mtok",
            "cached_input_per_mtok",
            "cache_write_5m_per_mtok",
            "cache_write_1h_per_mtok",
            "storage_per_mtok_hour",
            "output_per_mtok",
            "thinking_per_mtok",
            "audio_input_per_mtok",
            "audio_cached_input_per_mtok",
            "audio_output_per_mtok",
            "long_threshold_basis",
            "long_storage_per_mtok_hour",
            "time_discounts",
            "long_threshold_tokens",
            "long_input_per_mtok",
            "long_cached_input_per_mtok",
            "long_cache_write_5m_per_mtok",
            "long_cache_write_1h_per_mtok",
            "long_output_per_mtok",
            "version",
            "effective_from",
            "effective_to",
            "superseded_at",
            "superseded_by",
            "source",
            "note",
            "created_by",
        },
        ignored={"id", "created_at"},
    ),
    # A ledger row changes only through an estimate correction (counts, cost, the flag).
    "billing.UsageRecord": _fields(
        {
            "tenant",
            "request_id",
            "client_request_id",
            "estimated",
            "autopilot",
            "route",
            "occurred_at",
            "provider",
            "model",
            "worker",
            "pool",
            "api_key_id",
            "principal_id",
            "cache_id",
            *COUNT_FIELDS,
            "kind",
            "ttft_ms",
            "latency_ms",
            "status",
            "stream",
            "price_version",
            "pool_price",
            "cost_nanos",
            "cost_without_cache_nanos",
            "cost_micros",
            "cost_without_cache_micros",
        },
        ignored={"id", "recorded_at", "repriced_at"},
    ),
    "billing.PoolPrice": _fields(
        {
            "pool",
            "gpu_hour_usd",
            "prefill_tokens_per_gpu_second",
            "decode_tokens_per_gpu_second",
            "kv_blocks_per_gpu",
            "kv_block_tokens",
            "version",
            "effective_from",
            "effective_to",
            "superseded_at",
            "superseded_by",
            "source",
            "note",
            "created_by",
        },
        ignored={"id", "created_at"},
    ),
    "workers.Worker": _fields(
        {
            "name",
            "pool",
            "base_url",
            "model",
            "engine",
            "state",
            "block_size",
            "num_blocks",
            "kv_bytes_per_token",
            "dev_mode",
            "kv_events_endpoint",
            "engine_version",
            "hash_algo",
            "hash_seed",
            "tokenizer",
        },
        sensitive={"api_key_sealed"},
        # Scraped every probe: the worker's own numbers, not a change anyone made.
        ignored={"id", "metrics", "last_seen_at", "created_at", "updated_at"},
    ),
    "gateway.ProviderCredential": _fields(
        {"tenant", "provider", "fingerprint", "cache_autopilot", "created_by"},
        sensitive={"secret_sealed"},
        ignored={"id", "created_at", "updated_at"},
    ),
    "gateway.RateLimit": _fields(
        {
            "tenant",
            "api_key",
            "requests_per_minute",
            "tokens_per_minute",
            "concurrent_requests",
            "weight",
            "created_by",
        },
        ignored={"id", "created_at", "updated_at"},
    ),
    "audit.AuditExport": _fields(
        {
            "tenant",
            "requested_by",
            "requested_by_name",
            "format",
            "filters",
            "idempotency_key",
            "status",
            "total",
            "records",
            "withheld",
            "error_code",
            "error_message",
            "file_name",
            "file_size",
            "file_sha256",
            "finished_at",
        },
        ignored={
            "id",
            "processed",
            "manifest",
            "attempts",
            "created_at",
            "started_at",
            "heartbeat_at",
        },
    ),
    "audit.AuditSigningKey": _fields(
        {"kid", "algorithm", "public_key", "fingerprint", "retired_at"},
        ignored={"created_at"},
    ),
}


def audit_fields_for(model: type[models.Model]) -> AuditFields:
    """The declaration of ``model``; LookupError for a model nobody declared (a bug)."""
    label = f"{model._meta.app_label}.{model._meta.object_name}"
    try:
        return AUDITED_MODELS[label]
    except KeyError:
        raise LookupError(
            f"{label} is not declared in audit/registry.py: classify its fields before "
            "snapshotting it into the audit log."
        ) from None
