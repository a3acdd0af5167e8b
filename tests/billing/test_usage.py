"""The usage ledger: Redis queue → batched flush → ledger + rollups, idempotent; reprice."""

from __future__ import annotations

import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent
from billing.errors import InvalidUsage
from billing.models import Granularity, ModelPrice, UsageRecord, UsageRollup
from billing.services import model_price_correct, usage_flush, usage_record
from billing.services.usage import queue_key, usage_batch_claim
from billing.tasks import usage_flush_task
from tests.billing.conftest import T0

pytestmark = pytest.mark.django_db


def _record(tenant, request_id: str, **overrides) -> None:
    fields = {
        "tenant": tenant,
        "request_id": request_id,
        "provider": "vertex",
        "model": "gemini-2.5-pro",
        "occurred_at": T0,
        "prompt_tokens": 100_000,
        "cached_read_tokens": 90_000,
        "output_tokens": 1_000,
        "ttft_ms": 140,
        "latency_ms": 2_300,
        "cache_id": "cache-1",
        "worker": "vertex:us-central1",
    }
    fields.update(overrides)
    usage_record(**fields)


def test_the_request_path_only_appends_to_redis(
    tenant_a, price_book, usage_queue, django_assert_num_queries
) -> None:
    with django_assert_num_queries(0):
        _record(tenant_a, "req-1")
    assert usage_queue.llen(queue_key()) == 1
    assert not UsageRecord.objects.all_tenants().exists()


def test_a_message_names_its_tenant_by_row_or_by_id_exactly_once(tenant_a) -> None:
    from billing.services.usage import usage_message

    fields = {"request_id": "r", "provider": "vertex", "model": "m", "occurred_at": T0}
    by_row = usage_message(tenant=tenant_a, prompt_tokens=5, **fields)
    assert usage_message(tenant_id=str(tenant_a.pk), prompt_tokens=5, **fields) == by_row
    for tenant in ({}, {"tenant": tenant_a, "tenant_id": str(tenant_a.pk)}):
        with pytest.raises(InvalidUsage):
            usage_message(prompt_tokens=5, **tenant, **fields)


def test_flush_writes_priced_rows_and_minute_and_day_rollups(
    tenant_a, price_book, usage_queue
) -> None:
    _record(tenant_a, "req-1")
    _record(tenant_a, "req-2", occurred_at=T0 + timedelta(seconds=30), stream=True)
    _record(
        tenant_a,
        "req-3",
        occurred_at=T0 + timedelta(minutes=1),
        status="upstream_error",
        prompt_tokens=0,
        cached_read_tokens=0,
        output_tokens=0,
    )
    result = usage_flush()
    assert (result.inserted, result.duplicates, result.unpriced) == (3, 0, 0)
    assert usage_queue.llen(queue_key()) == 0
    row = UsageRecord.objects.all_tenants().get(request_id="req-1")
    assert row.price_version_id == price_book[("vertex", "gemini-2.5-pro")].pk
    assert (row.cost_micros, row.cost_without_cache_micros) == (33_750, 135_000)
    assert (row.ttft_ms, row.latency_ms, row.cache_id) == (140, 2_300, "cache-1")
    # Streaming with the same counts costs the same; a failed request billed nothing.
    assert UsageRecord.objects.all_tenants().get(request_id="req-2").cost_micros == 33_750
    assert UsageRecord.objects.all_tenants().get(request_id="req-3").cost_micros == 0
    minute = UsageRollup.objects.all_tenants().get(granularity=Granularity.MINUTE, bucket=T0)
    assert (minute.requests, minute.cost_micros, minute.cached_read_tokens) == (2, 67_500, 180_000)
    day = UsageRollup.objects.all_tenants().get(granularity=Granularity.DAY)
    assert day.bucket == T0.replace(hour=0)
    assert (day.requests, day.error_requests, day.cost_micros) == (3, 1, 67_500)
    assert day.cost_without_cache_micros == 270_000


def test_running_the_flush_twice_and_replaying_messages_changes_nothing(
    tenant_a, price_book, usage_queue
) -> None:
    _record(tenant_a, "req-1")
    assert usage_flush_task.apply().result == 1
    assert usage_flush_task.apply().result == 0  # nothing left: a no-op
    _record(tenant_a, "req-1")  # the gateway retried its record call
    _record(tenant_a, "req-1")
    result = usage_flush()
    assert (result.inserted, result.duplicates) == (0, 2)
    assert UsageRecord.objects.all_tenants().count() == 1
    assert UsageRollup.objects.all_tenants().get(granularity=Granularity.DAY).requests == 1


def test_a_batch_claimed_by_a_worker_that_died_is_flushed_later(
    tenant_a, price_book, usage_queue, settings
) -> None:
    _record(tenant_a, "req-1")
    _record(tenant_a, "req-2")
    # A worker claimed the batch (moved it out of the queue) long ago and died before
    # inserting it.
    orphan = usage_batch_claim(batch_size=100, now=time.time() - 10_000)
    assert orphan is not None and usage_queue.llen(queue_key()) == 0
    result = usage_flush()
    assert (result.recovered_batches, result.inserted) == (1, 2)
    assert not usage_queue.exists(orphan)
    assert usage_flush().recovered_batches == 0  # nothing is left claimed


def test_rows_without_a_price_are_kept_at_zero_until_a_reprice_finds_one(
    tenant_a, price_book, usage_queue, platform_actor
) -> None:
    _record(
        tenant_a,
        "req-x",
        provider="openai",
        model="gpt-unknown",
        prompt_tokens=1_000,
        cached_read_tokens=0,
        output_tokens=0,
    )
    assert usage_flush().unpriced == 1
    row = UsageRecord.objects.all_tenants().get(request_id="req-x")
    assert (row.cost_micros, row.price_version_id) == (0, None)
    ModelPrice.objects.create(
        provider="openai",
        model="gpt-unknown",
        version=1,
        effective_from=T0 - timedelta(days=1),
        input_per_mtok=2,
        cached_input_per_mtok=1,
        cache_write_5m_per_mtok=2,
        cache_write_1h_per_mtok=2,
        output_per_mtok=8,
        source="test",
    )
    call_command(
        "billing", "reprice", "--since", (T0 - timedelta(hours=1)).isoformat(), stdout=StringIO()
    )
    row.refresh_from_db()
    assert row.cost_micros == 2_000
    assert UsageRollup.objects.all_tenants().get(granularity=Granularity.DAY).cost_micros == 2_000


def test_a_reprice_after_a_price_fix_updates_rows_and_rollups_and_is_audited(
    tenant_a, tenant_b, price_book, usage_queue, platform_actor
) -> None:
    _record(tenant_a, "a-1")
    _record(tenant_a, "a-2", occurred_at=T0 + timedelta(hours=2))
    _record(tenant_b, "b-1")
    usage_flush()
    # The 2.5 Pro cached rate was entered wrong; the fix: 0.125 → 0.10.
    pro = price_book[("vertex", "gemini-2.5-pro")]
    model_price_correct(
        actor=platform_actor,
        price=pro,
        rates={
            "input_per_mtok": "1.25",
            "cached_input_per_mtok": "0.10",
            "storage_per_mtok_hour": "4.50",
            "output_per_mtok": "10",
            "long_threshold_tokens": 200_000,
            "long_input_per_mtok": "2.50",
            "long_cached_input_per_mtok": "0.25",
            "long_output_per_mtok": "15",
        },
        source="price fix",
    )
    out = StringIO()
    call_command(
        "billing", "reprice", "--since", T0.isoformat(), "--tenant", tenant_a.slug, stdout=out
    )
    assert "Repriced 2 of 2 usage rows (delta -4500" in out.getvalue()
    # 12,500 + 90,000 × 0.10 + 10,000 = 31,500 (was 33,750)
    assert set(
        UsageRecord.objects.all_tenants()
        .filter(tenant=tenant_a)
        .values_list("cost_micros", flat=True)
    ) == {31_500}
    assert (
        UsageRecord.objects.all_tenants().get(request_id="b-1").cost_micros == 33_750
    )  # other tenant
    day_a = UsageRollup.objects.all_tenants().get(tenant=tenant_a, granularity=Granularity.DAY)
    assert (day_a.cost_micros, day_a.requests) == (63_000, 2)
    minutes = UsageRollup.objects.all_tenants().filter(
        tenant=tenant_a, granularity=Granularity.MINUTE
    )
    assert sorted(minutes.values_list("cost_micros", flat=True)) == [31_500, 31_500]
    event = AuditEvent.objects.filter(action="billing.usage.reprice").latest("seq")
    assert event.tenant_id == tenant_a.pk and event.details["rows_changed"] == 2
    # Every tenant: only B's row is left to fix; a second run changes nothing.
    everyone = StringIO()
    call_command("billing", "reprice", "--since", T0.isoformat(), stdout=everyone)
    assert "Repriced 1 of 3 usage rows (delta -2250" in everyone.getvalue()
    again = StringIO()
    call_command("billing", "reprice", "--since", T0.isoformat(), stdout=again)
    assert "Repriced 0 of 3 usage rows" in again.getvalue()


def test_the_reprice_command_rejects_bad_options(db) -> None:
    with pytest.raises(CommandError):
        call_command("billing", "reprice", "--since", "yesterday")
    with pytest.raises(CommandError):
        call_command("billing", "reprice", "--since", "2026-01-01T00:00:00")
    with pytest.raises(CommandError):
        call_command("billing", "reprice", "--since", "2026-01-01T00:00:00Z", "--tenant", "nope")


@pytest.mark.parametrize(
    "bad",
    [
        {"prompt_tokens": -1},
        {"cached_read_tokens": 200_000},
        {"provider": "azure"},
        {"status": "weird"},
        {"model": ""},
        {"occurred_at": T0.replace(tzinfo=None)},
        {"api_key_id": "not-a-uuid"},
        {"ttft_ms": -5},
    ],
)
def test_impossible_usage_is_refused_and_nothing_is_queued(tenant_a, usage_queue, bad) -> None:
    with pytest.raises(InvalidUsage):
        _record(tenant_a, "req-bad", **bad)
    assert usage_queue.llen(queue_key()) == 0
