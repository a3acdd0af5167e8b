"""Audit fidelity: secrets never reach the chain, real data always does.

Both sides are checked through the real services (what each audit row holds) and
through a real export (what leaves the system).
"""

from __future__ import annotations

import json
import zipfile

import pytest

from audit.models import AuditEvent
from audit.redaction import REDACTED, scrub, scrub_url
from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot, values_snapshot
from billing.services.budgets import budget_create, budget_rotate_secret, budget_update
from billing.services.prices import pool_price_create
from tenants.services.keys import api_key_create, key_generate
from tenants.services.tenants import tenant_rotate_cache_salt
from tests.audit.helpers import bundle_path, run_export
from tests.factories import actor_for

WEBHOOK = "https://hooks.example.com/cacheplane/alerts?channel=ops&token=s3cr3t-webhook-token"


# --- Values: what is scrubbed, what is kept ------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://alice:hunter2@alerts.example.com/hook",
            "https://[redacted]@alerts.example.com/hook",
        ),
        ("https://ghp_abc123@git.example.com/x", "https://[redacted]@git.example.com/x"),
        (
            "https://x.example.com/h?channel=ops&token=abc&api_key=k&sig=zz",
            "https://x.example.com/h?channel=ops&token=[redacted]&api_key=[redacted]&sig=[redacted]",
        ),
        (
            "https://s3.example.com/b/o?X-Amz-Credential=AK&X-Amz-Signature=ff&part=2",
            "https://s3.example.com/b/o?X-Amz-Credential=[redacted]&X-Amz-Signature=[redacted]&part=2",
        ),
        (
            "https://app.example.com/cb#access_token=eyJ&state=1",
            "https://app.example.com/cb#access_token=[redacted]&state=1",
        ),
        (
            "https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXX",
            "https://hooks.slack.com/[redacted]",
        ),
        (
            "https://discord.com/api/webhooks/123/abcDEF",
            "https://discord.com/[redacted]",
        ),
        # Ordinary URLs are kept whole: host, port, path and harmless parameters.
        (
            "http://worker-3.internal:8000/v1/models?limit=10",
            "http://worker-3.internal:8000/v1/models?limit=10",
        ),
        ("https://alerts.example.com/hook", "https://alerts.example.com/hook"),
    ],
)
def test_secrets_inside_urls_are_scrubbed_and_the_rest_is_kept(url: str, expected: str) -> None:
    assert scrub_url(url) == expected
    assert scrub_url(expected) == expected  # scrubbing twice changes nothing


def test_urls_and_api_keys_inside_text_and_nested_values_are_scrubbed() -> None:
    key = key_generate()
    value = {
        "error": f"POST https://u:p@h.example.com/x?token=t failed with key {key}.",
        "list": [f"Bearer {key}", "cpk_tooShort"],
        "count": 3,
    }
    assert scrub(value) == {
        "error": "POST https://[redacted]@h.example.com/x?token=[redacted] failed with key "
        "cpk_[redacted].",
        "list": ["Bearer cpk_[redacted]", "cpk_tooShort"],
        "count": 3,
    }


def test_real_data_with_secret_sounding_names_is_stored_as_is() -> None:
    digest = "9f" * 32
    values = {
        "content_digest": digest,
        "kv_block_tokens": 16,
        "prompt_tokens": 1200,
        "cached_read_tokens": 1024,
        "file_sha256": "ab" * 32,
        "password_policy": "min 12",
        "token_count": 4096,
    }
    assert scrub(values) == values
    assert diff(EMPTY, values_snapshot(values)) == {
        name: {"before": None, "after": value} for name, value in sorted(values.items())
    }


def test_audit_record_refuses_a_hand_built_diff_and_writes_nothing(tenant_a, admin_a) -> None:
    before = AuditEvent.objects.count()
    with pytest.raises(TypeError, match="audit.snapshot.diff"):
        audit_record(
            actor=actor_for(admin_a),
            action="tests.thing.update",
            tenant=tenant_a,
            changes={"secret": {"before": "old", "after": "new"}},  # type: ignore[arg-type]
        )
    assert AuditEvent.objects.count() == before


def test_details_are_scrubbed_by_value_and_never_by_key_name(tenant_a, admin_a) -> None:
    event = audit_record(
        actor=actor_for(admin_a),
        action="tests.thing.poke",
        tenant=tenant_a,
        details={"target": WEBHOOK, "token_count": 12, "digest": "ab" * 32},
    )
    event.refresh_from_db()
    assert event.details == {
        "target": "https://hooks.example.com/cacheplane/alerts?channel=ops&token=[redacted]",
        "token_count": 12,
        "digest": "ab" * 32,
    }


# --- Through the real services ---------------------------------------------------------


def _last(action: str) -> AuditEvent:
    return AuditEvent.objects.filter(action=action).latest("id")


def test_budget_audit_rows_hide_the_webhook_secret_and_url_token(tenant_a, admin_a) -> None:
    actor = actor_for(admin_a)
    budget = budget_create(
        actor=actor,
        tenant=tenant_a,
        name="ops",
        period="month",
        limit_micros=5_000_000,
        thresholds=[50, 90],
        webhook_url=WEBHOOK,
    )
    created = _last("billing.budget.create").changes
    assert created["webhook_url"]["after"] == (
        "https://hooks.example.com/cacheplane/alerts?channel=ops&token=[redacted]"
    )
    assert created["webhook_secret"] == {"before": None, "after": REDACTED}
    assert created["limit_micros"] == {"before": None, "after": 5_000_000}
    assert created["thresholds"] == {"before": None, "after": [50, 90]}

    # A new token in the URL is a change even though both sides scrub alike.
    budget_update(
        actor=actor,
        budget=budget,
        changes={"webhook_url": WEBHOOK.replace("s3cr3t-webhook-token", "rotated-token")},
    )
    updated = _last("billing.budget.update").changes
    assert set(updated) == {"webhook_url"}
    assert updated["webhook_url"]["before"] == updated["webhook_url"]["after"]

    old_secret = budget.webhook_secret
    rotated = budget_rotate_secret(actor=actor, budget=budget)
    assert _last("billing.budget.rotate_secret").changes == {
        "webhook_secret": {"before": REDACTED, "after": REDACTED}
    }
    for row in AuditEvent.objects.filter(tenant=tenant_a):
        text = json.dumps([row.changes, row.details])
        for secret in ("s3cr3t-webhook-token", "rotated-token", old_secret, rotated.webhook_secret):
            assert secret not in text


def test_key_and_salt_audit_rows_hold_no_credential(tenant_a, admin_a) -> None:
    actor = actor_for(admin_a)
    issued = api_key_create(actor=actor, tenant=tenant_a, name="ci")
    created = _last("tenants.api_key.create").changes
    assert created["name"] == {"before": None, "after": "ci"}
    assert created["prefix"] == {"before": None, "after": issued.key.prefix}
    assert created["digest"] == {"before": None, "after": REDACTED}

    salt_before = tenant_a.cache_salt_secret
    tenant = tenant_rotate_cache_salt(actor=actor, tenant=tenant_a)
    rotated = _last("tenants.cache_salt.rotate").changes
    assert rotated == {
        "cache_salt_secret": {"before": REDACTED, "after": REDACTED},
        "cache_salt_version": {"before": 1, "after": 2},
    }
    text = json.dumps([e.changes for e in AuditEvent.objects.all()])
    for secret in (issued.plaintext, issued.key.digest, salt_before, tenant.cache_salt_secret):
        assert secret not in text


def test_pool_price_audit_keeps_kv_block_tokens_and_rates(platform_admin) -> None:
    pool_price_create(
        actor=actor_for(platform_admin),
        pool="h100-audit",
        rates={
            "gpu_hour_usd": "2.50",
            "prefill_tokens_per_gpu_second": 10_000,
            "decode_tokens_per_gpu_second": 1_000,
            "kv_blocks_per_gpu": 10_000,
            "kv_block_tokens": 32,
        },
        source="vendor quote 2026-01",
    )
    changes = _last("billing.pool_price.create").changes
    assert changes["kv_block_tokens"] == {"before": None, "after": 32}
    assert changes["kv_blocks_per_gpu"] == {"before": None, "after": 10_000}
    assert changes["gpu_hour_usd"] == {"before": None, "after": "2.500000"}
    assert changes["source"] == {"before": None, "after": "vendor quote 2026-01"}


def test_cache_create_audit_keeps_the_content_digest_and_hides_the_content(
    vertex, tenant_a, admin_a
) -> None:
    from caches.services import lifecycle
    from tests.caches.conftest import big_content

    content = big_content(seed="audit-digest")
    outcome = lifecycle.cache_create(
        tenant=tenant_a,
        actor=actor_for(admin_a),
        spec=lifecycle.CacheSpec(
            name="digest-kept",
            provider="vertex",
            model="gemini-2.5-pro",
            content=content,
            ttl_seconds=3600,
        ),
    )
    cache = outcome.operation.cache
    changes = _last("caches.cache.create").changes
    assert changes["content_digest"] == {"before": None, "after": cache.content_digest}
    assert len(cache.content_digest) == 64
    assert changes["content"] == {"before": None, "after": REDACTED}
    assert changes["ttl_seconds"] == {"before": None, "after": 3600}
    assert "clause0_1" not in json.dumps(changes)


# --- Through the export ------------------------------------------------------------------


def test_the_export_carries_real_values_and_no_secret(tenant_a, admin_a) -> None:
    actor = actor_for(admin_a)
    budget_create(
        actor=actor,
        tenant=tenant_a,
        name="exported",
        period="month",
        limit_micros=1_000_000,
        webhook_url="https://bot:pa55w0rd@alerts.example.com/hook?signature=deadbeef",
    )
    issued = api_key_create(actor=actor, tenant=tenant_a, name="exported-key")
    digest = "c0" * 32
    audit_record(
        actor=actor,
        action="tests.thing.create",
        tenant=tenant_a,
        changes=diff(EMPTY, values_snapshot({"content_digest": digest, "kv_block_tokens": 16})),
    )
    export = run_export(tenant=tenant_a, by=actor)
    with zipfile.ZipFile(bundle_path(export)) as archive:
        text = archive.read("events.jsonl").decode()
    records = {r["action"]: r for r in map(json.loads, text.splitlines())}
    assert records["tests.thing.create"]["changes"] == {
        "content_digest": {"before": None, "after": digest},
        "kv_block_tokens": {"before": None, "after": 16},
    }
    assert records["billing.budget.create"]["changes"]["webhook_url"]["after"] == (
        "https://[redacted]@alerts.example.com/hook?signature=[redacted]"
    )
    for secret in ("pa55w0rd", "deadbeef", issued.plaintext, issued.key.digest):
        assert secret not in text


# --- The helper itself ---------------------------------------------------------------


def test_model_snapshot_narrowed_to_written_fields_reads_only_those(tenant_a) -> None:
    snap = model_snapshot(tenant_a, fields=["display_name", "updated_at", "cache_salt_secret"])
    # Ignored bookkeeping is dropped; the secret is shown only as set.
    assert snap.values == {"display_name": tenant_a.display_name, "cache_salt_secret": REDACTED}
    with pytest.raises(ValueError, match="no concrete field"):
        model_snapshot(tenant_a, fields=["nope"])
