"""Cacheplane's own settings (``CACHEPLANE_*``): audit signing, caches and providers,
billing, the gateway, routing and WebSocket rechecks.

Each value is read from the environment through the typed helpers in ``controlplane.env``,
so a malformed value stops the process with one line naming the variable.
"""

from __future__ import annotations

from pathlib import Path

from controlplane.env import (
    ConfigError,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_str,
    parse_with,
)
from controlplane.settings_deployment import BASE_DIR
from controlplane.settings_services import CELERY_TASK_TIME_LIMIT

# --- Cacheplane -----------------------------------------------------------------------
CACHEPLANE_DATA_DIR = Path(env_str("CACHEPLANE_DATA_DIR", str(BASE_DIR / ".cacheplane")) or "")

# --- Audit export and signing (see README "Audit export and verification") -------------
CACHEPLANE_EXPORT_DIR = Path(
    env_str("CACHEPLANE_EXPORT_DIR", str(CACHEPLANE_DATA_DIR / "exports")) or ""
)
# Ed25519 private key (PEM, or base64 of the 32 raw bytes) and its key id, set together.
# Unset in development: one is generated under CACHEPLANE_DATA_DIR (0600). Production
# must set both (exports and digests fail with `signing_key_missing` otherwise).
CACHEPLANE_AUDIT_SIGNING_KEY = env_str("CACHEPLANE_AUDIT_SIGNING_KEY", "") or ""
CACHEPLANE_AUDIT_SIGNING_KEY_ID = env_str("CACHEPLANE_AUDIT_SIGNING_KEY_ID", "") or ""
if bool(CACHEPLANE_AUDIT_SIGNING_KEY) != bool(CACHEPLANE_AUDIT_SIGNING_KEY_ID):
    raise ConfigError(
        "CACHEPLANE_AUDIT_SIGNING_KEY_ID",
        "CACHEPLANE_AUDIT_SIGNING_KEY and CACHEPLANE_AUDIT_SIGNING_KEY_ID are set together",
    )
if CACHEPLANE_AUDIT_SIGNING_KEY:
    from audit.signing import private_key_load

    parse_with("CACHEPLANE_AUDIT_SIGNING_KEY", CACHEPLANE_AUDIT_SIGNING_KEY, private_key_load)
    if len(CACHEPLANE_AUDIT_SIGNING_KEY_ID) > 64:
        raise ConfigError("CACHEPLANE_AUDIT_SIGNING_KEY_ID", "must be at most 64 characters")

# --- Caches and providers (see README "Cache objects") -----------------------------------
CACHEPLANE_CACHE_MAX_TTL_SECONDS = env_int(
    "CACHEPLANE_CACHE_MAX_TTL_SECONDS", 7 * 86400, minimum=60
)
CACHEPLANE_CACHE_DEFAULT_TTL_SECONDS = env_int(
    "CACHEPLANE_CACHE_DEFAULT_TTL_SECONDS", 3600, minimum=60
)
CACHEPLANE_CACHE_MAX_CONTENT_BYTES = env_int(
    "CACHEPLANE_CACHE_MAX_CONTENT_BYTES", 10 * 1024 * 1024, minimum=1024
)
# Empty: Google's endpoints. A URL: a Vertex emulator (development, tests, demos).
CACHEPLANE_VERTEX_BASE_URL = env_str("CACHEPLANE_VERTEX_BASE_URL", "") or ""
CACHEPLANE_VERTEX_API_VERSION = env_str("CACHEPLANE_VERTEX_API_VERSION", "v1") or "v1"
CACHEPLANE_VERTEX_PROJECT = env_str("CACHEPLANE_VERTEX_PROJECT", "") or ""
CACHEPLANE_VERTEX_LOCATION = env_str("CACHEPLANE_VERTEX_LOCATION", "us-central1") or ""
# A static bearer token (emulators only); unset: Application Default Credentials.
CACHEPLANE_VERTEX_STATIC_TOKEN = env_str("CACHEPLANE_VERTEX_STATIC_TOKEN", "") or ""
CACHEPLANE_VERTEX_DISPLAY_PREFIX = env_str("CACHEPLANE_VERTEX_DISPLAY_PREFIX", "cacheplane-") or ""
# No "adopt": a remote whose record is still creating it is always adopted; one that no
# record claims has no tenant to be adopted into (the value was accepted and did "report").
# "ended" (default): delete the orphans of ended records (superseded creates), report the
# rest; "delete": delete every orphan with our prefix; "report": delete none.
CACHEPLANE_RECONCILE_ORPHANS = env_choice(
    "CACHEPLANE_RECONCILE_ORPHANS", "ended", ("ended", "report", "delete")
)
CACHEPLANE_VLLM_API_KEY = env_str("CACHEPLANE_VLLM_API_KEY", "") or ""
CACHEPLANE_VLLM_PIN_REFRESH_SECONDS = env_int("CACHEPLANE_VLLM_PIN_REFRESH_SECONDS", 120, minimum=5)
CACHEPLANE_PROVIDER_TIMEOUT_SECONDS = env_float(
    "CACHEPLANE_PROVIDER_TIMEOUT_SECONDS", 60.0, minimum=0.1
)
# Provider calls are not retried in the SDK: the operation row bounds its attempts and the
# Celery task spaces them (controlplane.celery.TRANSIENT_RETRY_POLICY; README, Code health).
CACHEPLANE_OPERATION_MAX_ATTEMPTS = env_int("CACHEPLANE_OPERATION_MAX_ATTEMPTS", 8, minimum=1)
# A running operation whose worker died is re-enqueued once its lease lapses.
CACHEPLANE_OPERATION_LEASE_SECONDS = env_int(
    "CACHEPLANE_OPERATION_LEASE_SECONDS", CELERY_TASK_TIME_LIMIT + 30, minimum=1
)
CACHEPLANE_SWEEP_BATCH = env_int("CACHEPLANE_SWEEP_BATCH", 500, minimum=1)

# --- Billing (see README "Billing") -----------------------------------------------------
# Redis list the gateway appends usage rows to; the flush task (beat, every 5 s) drains it
# in batches of CACHEPLANE_BILLING_FLUSH_BATCH rows.
CACHEPLANE_BILLING_USAGE_QUEUE_KEY = (
    env_str("CACHEPLANE_BILLING_USAGE_QUEUE_KEY", "cacheplane:billing:usage")
    or "cacheplane:billing:usage"
)
CACHEPLANE_BILLING_FLUSH_BATCH = env_int("CACHEPLANE_BILLING_FLUSH_BATCH", 5000, minimum=1)
CACHEPLANE_BILLING_FLUSH_MAX_BATCHES = env_int(
    "CACHEPLANE_BILLING_FLUSH_MAX_BATCHES", 40, minimum=1
)
# A claimed batch not finished after this long (its worker died) is flushed again.
CACHEPLANE_BILLING_FLUSH_LEASE_SECONDS = env_int(
    "CACHEPLANE_BILLING_FLUSH_LEASE_SECONDS", CELERY_TASK_TIME_LIMIT * 2, minimum=1
)
CACHEPLANE_BILLING_RESERVATION_TTL_SECONDS = env_int(
    "CACHEPLANE_BILLING_RESERVATION_TTL_SECONDS", 900, minimum=1
)
CACHEPLANE_BILLING_EXPIRE_BATCH = env_int("CACHEPLANE_BILLING_EXPIRE_BATCH", 500, minimum=1)
CACHEPLANE_BILLING_WEBHOOK_TIMEOUT_SECONDS = env_int(
    "CACHEPLANE_BILLING_WEBHOOK_TIMEOUT_SECONDS", 5, minimum=1
)
# The default vLLM pool's GPU-hour chargeback, seeded once by migration billing.0004 (the
# pool "default", also used for pools without a price of their own); see .env.example.
CACHEPLANE_VLLM_DEFAULT_GPU_HOUR_USD = env_float(
    "CACHEPLANE_VLLM_DEFAULT_GPU_HOUR_USD", 2.50, minimum=0.0
)
CACHEPLANE_VLLM_DEFAULT_PREFILL_TOKENS_PER_GPU_SECOND = env_int(
    "CACHEPLANE_VLLM_DEFAULT_PREFILL_TOKENS_PER_GPU_SECOND", 4600, minimum=1
)
CACHEPLANE_VLLM_DEFAULT_DECODE_TOKENS_PER_GPU_SECOND = env_int(
    "CACHEPLANE_VLLM_DEFAULT_DECODE_TOKENS_PER_GPU_SECOND", 1500, minimum=1
)
CACHEPLANE_VLLM_DEFAULT_KV_BLOCKS_PER_GPU = env_int(
    "CACHEPLANE_VLLM_DEFAULT_KV_BLOCKS_PER_GPU", 2000, minimum=1
)

# --- Gateway -------------------------------------------------------------------------------
CACHEPLANE_GATEWAY_MAX_BODY_BYTES = env_int(
    "CACHEPLANE_GATEWAY_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=1024
)
CACHEPLANE_GATEWAY_MAX_TOKENS = env_int("CACHEPLANE_GATEWAY_MAX_TOKENS", 8192, minimum=1)
# Gateway budget holds and rate limits live in Redis under these prefixes.
CACHEPLANE_BUDGET_REDIS_PREFIX = env_str("CACHEPLANE_BUDGET_REDIS_PREFIX", "cacheplane:budget")
CACHEPLANE_GATEWAY_RATELIMIT_PREFIX = env_str(
    "CACHEPLANE_GATEWAY_RATELIMIT_PREFIX", "cacheplane:ratelimit"
)
# Fair share: requests in flight per vLLM worker (per gateway process) and per Vertex
# model before requests queue in weighted fair order; a queued request waits at most
# CACHEPLANE_GATEWAY_QUEUE_TIMEOUT_SECONDS, then gets 429 pool_saturated.
CACHEPLANE_GATEWAY_WORKER_CONCURRENCY = env_int(
    "CACHEPLANE_GATEWAY_WORKER_CONCURRENCY", 64, minimum=1
)
CACHEPLANE_GATEWAY_VERTEX_CONCURRENCY = env_int(
    "CACHEPLANE_GATEWAY_VERTEX_CONCURRENCY", 256, minimum=1
)
CACHEPLANE_GATEWAY_QUEUE_TIMEOUT_SECONDS = env_float(
    "CACHEPLANE_GATEWAY_QUEUE_TIMEOUT_SECONDS", 30.0, minimum=0.01
)
CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS = env_float(
    "CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS", 120.0, minimum=0.1
)

# Budget webhooks may reach private/loopback addresses only when explicitly allowed, in
# development too (a tenant's URL must not reach the machine's own network by default).
CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE = env_bool(
    "CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE", False
)
# Gateway routing: "kv_events" routes on the KV indexer's Redis index when it is fresh
# (falling back per request to the character-based guess); "approximate" never reads it.
CACHEPLANE_ROUTING_INDEX = env_choice(
    "CACHEPLANE_ROUTING_INDEX", "kv_events", ("kv_events", "approximate")
)

# WebSocket revocation bound: how often an open socket re-reads its credential and
# re-decides access (tenants.access) — a logout, revoked key, removed binding or
# suspension closes it within this many seconds.
CACHEPLANE_WS_RECHECK_SECONDS = env_float("CACHEPLANE_WS_RECHECK_SECONDS", 2.0, minimum=0.05)
# The same bound for a gateway stream already running: each gateway process re-reads the
# keys of its open streams this often (one query) and ends a stream whose key was revoked
# or expired, whose principal was disabled or whose tenant was suspended.
CACHEPLANE_GATEWAY_STREAM_RECHECK_SECONDS = env_float(
    "CACHEPLANE_GATEWAY_STREAM_RECHECK_SECONDS", 2.0, minimum=0.05
)

# How many random money-path sequences tests/billing/test_ledger_property.py generates: a
# few in the plain suite, 2,000 in CI's .ci/steps/45-ledger-property.sh.
CACHEPLANE_LEDGER_PROPERTY_SEQUENCES = env_int(
    "CACHEPLANE_LEDGER_PROPERTY_SEQUENCES", 30, minimum=1
)

# --- Hosted providers (gateway.adapters.anthropic / openai / deepseek; docs/gateway/providers.md)
# Where each provider's API is (local protocol servers in tests).
CACHEPLANE_ANTHROPIC_BASE_URL = (
    env_str("CACHEPLANE_ANTHROPIC_BASE_URL", "https://api.anthropic.com") or ""
).rstrip("/")
CACHEPLANE_OPENAI_BASE_URL = (
    env_str("CACHEPLANE_OPENAI_BASE_URL", "https://api.openai.com/v1") or ""
).rstrip("/")
CACHEPLANE_DEEPSEEK_BASE_URL = (
    env_str("CACHEPLANE_DEEPSEEK_BASE_URL", "https://api.deepseek.com") or ""
).rstrip("/")
# Fernet keys sealing tenants' provider API keys, comma-separated, newest first: the first
# seals, every one opens (MultiFernet), so a rotation adds a key in front and
# `cacheplane provider-credentials-reseal` moves the rows to it. Unset: one key derived
# from CACHEPLANE_SECRET_KEY (development).
CACHEPLANE_PROVIDER_CREDENTIAL_KEYS = env_str("CACHEPLANE_PROVIDER_CREDENTIAL_KEYS", "") or ""
CACHEPLANE_GATEWAY_HOSTED_CONCURRENCY = env_int(
    "CACHEPLANE_GATEWAY_HOSTED_CONCURRENCY", 256, minimum=1
)
