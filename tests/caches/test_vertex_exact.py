"""The Vertex cache path made exact: lost replies, reconciliation's read order, superseded
creates, and no scope listing on a first create (google-genai against the emulator)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from audit.models import AuditEvent
from billing.models import StorageAccrual, UsageRecord
from caches.models import CacheObject, CacheOperation, CacheState, OperationStatus
from caches.providers.base import TransientProviderError
from caches.providers.vertex import transport_error_types
from caches.services import lifecycle, reconcile
from caches.services.execution import operation_execute
from tests.caches.conftest import big_content
from tests.factories import actor_for
from tests.gateway.support import price_vertex_flash_with_audio

pytestmark = pytest.mark.django_db
FLASH = "gemini-2.5-flash"


def _create(tenant, admin, **overrides) -> lifecycle.CreateOutcome:
    values = {
        "name": "contracts",
        "provider": "vertex",
        "model": FLASH,
        "content": big_content(),
        "ttl_seconds": 3600,
    }
    values.update(overrides)
    return lifecycle.cache_create(
        tenant=tenant, actor=actor_for(admin), spec=lifecycle.CacheSpec(**values)
    )


def _cache(outcome) -> CacheObject:
    return CacheObject.objects.all_tenants().get(pk=outcome.operation.cache_id)


def _in_thread(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    finally:
        connection.close()  # this thread's own connection


def test_google_genai_raises_its_own_transports_errors_for_a_lost_reply(vertex) -> None:
    """What the SDK really raises when a reply is cut off: httpx2's error (sync) and
    aiohttp's (async), neither an httpx.TransportError (all the provider used to catch)."""
    from caches.providers.vertex_emulator.sdk_client import genai_client_for

    client = genai_client_for(vertex.base_url)
    vertex.drop_replies(methods=["GET"], path_contains="cachedContents")
    with pytest.raises(transport_error_types()) as raised:
        list(client.caches.list())
    assert not isinstance(raised.value, httpx.TransportError)
    assert type(raised.value).__module__.split(".")[0] == "httpx2"
    client.close()


def test_a_lost_create_reply_is_retried_and_the_retry_adopts_the_remote_cache(
    vertex, tenant_a, admin_a
) -> None:
    outcome = _create(tenant_a, admin_a)
    vertex.drop_replies(methods=["POST"], path_contains="cachedContents")
    with pytest.raises(TransientProviderError, match="unreachable"):
        operation_execute(operation_id=str(outcome.operation.pk))
    op = CacheOperation.objects.all_tenants().get(pk=outcome.operation.pk)
    # Released for the task's retry at once, not left running until the lease lapses.
    assert (op.status, op.lease_until, op.error_code) == (
        OperationStatus.PENDING,
        None,
        "provider_unavailable",
    )
    assert len(vertex.stored_caches()) == 1  # the create took effect; only its reply was lost
    assert operation_execute(operation_id=str(op.pk)) == OperationStatus.SUCCEEDED
    cache = _cache(outcome)
    assert cache.state == CacheState.ACTIVE
    assert cache.remote_name == vertex.stored_caches()[0].name
    assert len(vertex.create_requests()) == 1  # adopted, not created twice


def test_a_first_create_does_not_list_the_remote_scope(vertex, tenant_a, admin_a) -> None:
    outcome = _create(tenant_a, admin_a)
    assert operation_execute(operation_id=str(outcome.operation.pk)) == OperationStatus.SUCCEEDED
    assert vertex.requests(method="GET") == []
    assert len(vertex.create_requests()) == 1


@pytest.mark.django_db(transaction=True)
def test_a_cache_that_becomes_active_while_reconciliation_lists_stays_active(
    vertex, tenant_a, admin_a
) -> None:
    outcome = _create(tenant_a, admin_a)
    listing = vertex.hold_replies(methods=["GET"], path_contains="cachedContents")
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(
            _in_thread, reconcile.reconcile_vertex_scope, project="p1", location="us-central1"
        )
        assert listing.wait_reached(), "reconciliation never listed the scope"
        # The listing (taken before the create) is on its way back; the create lands now.
        assert operation_execute(operation_id=str(outcome.operation.pk)) == "succeeded"
        listing.release()
        run = running.result(timeout=60)
    cache = _cache(outcome)
    assert cache.state == CacheState.ACTIVE
    assert run.expired == 0 and run.errors == []
    assert len(vertex.stored_caches()) == 1


@pytest.mark.django_db(transaction=True)
def test_a_create_superseded_by_an_eviction_books_its_creation_and_deletes_its_remote(
    vertex, tenant_a, admin_a, redis_flush
) -> None:
    price_vertex_flash_with_audio()
    outcome = _create(tenant_a, admin_a)
    reply = vertex.hold_replies(methods=["POST"], path_contains="cachedContents")
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(_in_thread, operation_execute, operation_id=str(outcome.operation.pk))
        assert reply.wait_reached(), "the create never reached Vertex"
        # The remote exists; before its reply arrives, the cache is evicted (no remote
        # name yet, so the eviction deletes nothing).
        evict = lifecycle.cache_evict(cache=_cache(outcome), actor=actor_for(admin_a))
        assert operation_execute(operation_id=str(evict.pk)) == OperationStatus.SUCCEEDED
        assert len(vertex.stored_caches()) == 1
        reply.release()
        assert running.result(timeout=60) == OperationStatus.SUCCEEDED
    op = CacheOperation.objects.all_tenants().get(pk=outcome.operation.pk)
    assert op.error_code == "superseded"
    cache = _cache(outcome)
    assert cache.state == CacheState.EVICTED
    assert vertex.stored_caches() == []  # deleted by the worker that made it
    assert cache.token_count and cache.activated_at and cache.ended_at >= cache.activated_at
    delete = AuditEvent.objects.get(action="caches.remote.delete", target_id=str(cache.pk))
    assert delete.details["remote_name"] == cache.remote_name
    from billing.services.usage import usage_flush

    usage_flush()
    creation = UsageRecord.objects.all_tenants().get(cache_id=str(cache.pk), kind="cache_create")
    assert creation.prompt_tokens == cache.token_count and creation.cost_nanos > 0


@pytest.mark.django_db(transaction=True)
def test_reconciliation_deletes_the_orphan_of_an_ended_cache_by_default_and_books_its_storage(
    vertex, tenant_a, admin_a, settings, redis_flush
) -> None:
    assert settings.CACHEPLANE_RECONCILE_ORPHANS == "ended"
    price_vertex_flash_with_audio()
    outcome = _create(tenant_a, admin_a)
    reply = vertex.hold_replies(methods=["POST"], path_contains="cachedContents")
    vertex.inject_fault(503, count=1, methods=["DELETE"])  # the worker's own cleanup fails
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(_in_thread, operation_execute, operation_id=str(outcome.operation.pk))
        assert reply.wait_reached()
        evict = lifecycle.cache_evict(cache=_cache(outcome), actor=actor_for(admin_a))
        operation_execute(operation_id=str(evict.pk))
        reply.release()
        running.result(timeout=60)
    assert len(vertex.stored_caches()) == 1  # the orphan the failed cleanup left
    ended_before = _cache(outcome).ended_at
    run = reconcile.reconcile_vertex_scope(project="p1", location="us-central1")
    assert run.deleted_orphans == 1 and vertex.stored_caches() == []
    cache = _cache(outcome)
    assert cache.ended_at > ended_before  # storage ran until the orphan was deleted
    event = AuditEvent.objects.get(action="caches.remote.delete", target_id=str(cache.pk))
    assert event.details["reason"].startswith("reconciliation")
    accrued = StorageAccrual.objects.filter(tenant=tenant_a, cache_id=str(cache.pk))
    assert accrued.exists() and sum(row.cost_nanos for row in accrued) > 0
    assert reconcile.reconcile_vertex_scope(project="p1", location="us-central1").errors == []


def test_an_orphan_no_record_names_is_only_reported_by_default(vertex, tenant_a) -> None:
    from caches.providers.vertex_emulator.sdk_client import genai_client_for

    client = genai_client_for(vertex.base_url)
    client.caches.create(
        model=FLASH,
        config={
            "display_name": "cacheplane-00000000-0000-0000-0000-000000000001",
            "system_instruction": "x " * 3000,
            "ttl": "600s",
        },
    )
    run = reconcile.reconcile_vertex_scope(project="p1", location="us-central1")
    assert len(run.errors) == 1 and run.deleted_orphans == 0
    assert len(vertex.stored_caches()) == 1
    client.close()
