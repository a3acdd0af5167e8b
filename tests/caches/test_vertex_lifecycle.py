"""Cache objects on Vertex AI, end to end through google-genai and the emulator."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from audit.models import AuditEvent
from caches.errors import (
    BelowMinimumTokens,
    ContentTooLarge,
    GcsUriNotAllowed,
    IdempotencyKeyReused,
    InvalidCron,
    InvalidTtl,
    UnknownModel,
)
from caches.models import (
    CacheObject,
    CacheOperation,
    CacheState,
    OperationStatus,
    TenantCacheSettings,
    TtlPolicy,
)
from caches.providers.base import TransientProviderError
from caches.services import lifecycle, reconcile, scheduling
from caches.services.execution import operation_execute
from tests.caches.conftest import big_content
from tests.caches.processes import wait_for
from tests.factories import actor_for

pytestmark = pytest.mark.django_db


def _spec(**overrides) -> lifecycle.CacheSpec:
    values = {
        "name": "contracts",
        "provider": "vertex",
        "model": "gemini-2.5-flash",
        "content": big_content(),
        "ttl_seconds": 3600,
    }
    values.update(overrides)
    return lifecycle.CacheSpec(**values)


def _create(tenant, admin, **overrides):
    return lifecycle.cache_create(tenant=tenant, actor=actor_for(admin), spec=_spec(**overrides))


def _run(outcome) -> CacheObject:
    operation_execute(operation_id=str(outcome.operation.pk))
    return CacheObject.objects.all_tenants().get(pk=outcome.operation.cache_id)


def test_create_goes_pending_then_active_with_remote_facts(
    vertex, tenant_a, admin_a, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        outcome = _create(tenant_a, admin_a)
    assert outcome.created and len(callbacks) == 1  # the task is enqueued after commit
    cache = outcome.operation.cache
    assert cache.state == CacheState.PENDING
    assert AuditEvent.objects.filter(action="caches.cache.create", tenant=tenant_a).exists()
    cache = _run(outcome)
    assert cache.state == CacheState.ACTIVE
    stored = vertex.stored_caches()
    assert len(stored) == 1
    assert cache.remote_name == stored[0].name
    assert cache.token_count == stored[0].total_token_count > 1024
    assert abs((cache.expire_at - timezone.now()) - timedelta(hours=1)) < timedelta(minutes=1)
    states = list(cache.transitions.values_list("to_state", flat=True))
    assert states == ["creating", "active"]
    body = vertex.create_requests()[0].body
    assert body["displayName"] == f"cacheplane-{cache.pk}" and body["ttl"] == "3600s"
    assert [t["name"] for t in body["tools"][0]["functionDeclarations"]] == [
        "cite",
        "search_clauses",
    ]


def test_running_the_operation_twice_is_a_noop(vertex, tenant_a, admin_a) -> None:
    outcome = _create(tenant_a, admin_a)
    assert operation_execute(operation_id=str(outcome.operation.pk)) == "succeeded"
    assert operation_execute(operation_id=str(outcome.operation.pk)) is None
    assert len(vertex.create_requests()) == 1


def test_a_retried_create_adopts_the_remote_cache_instead_of_making_a_second(
    vertex, tenant_a, admin_a
) -> None:
    outcome = _create(tenant_a, admin_a)
    operation_execute(operation_id=str(outcome.operation.pk))
    # Pretend the worker died after the remote call: the record still says running.
    cache = CacheObject.objects.all_tenants().get(pk=outcome.operation.cache_id)
    CacheObject.objects.all_tenants().filter(pk=cache.pk).update(state=CacheState.CREATING)
    CacheOperation.objects.all_tenants().filter(pk=outcome.operation.pk).update(
        status=OperationStatus.RUNNING, lease_until=timezone.now() - timedelta(seconds=1)
    )
    assert operation_execute(operation_id=str(outcome.operation.pk)) == "succeeded"
    assert len(vertex.stored_caches()) == 1
    assert len(vertex.create_requests()) == 1


def test_same_content_and_model_reuses_the_live_cache_within_a_tenant_only(
    vertex, tenant_a, tenant_b, admin_a, admin_b
) -> None:
    first = _create(tenant_a, admin_a)
    again = _create(tenant_a, admin_a, name="contracts-copy")
    assert not again.created and again.operation.pk == first.operation.pk
    other = _create(tenant_b, admin_b)
    assert other.created and other.operation.cache_id != first.operation.cache_id
    assert CacheObject.objects.all_tenants().count() == 2


def test_idempotency_key_replays_and_refuses_a_different_body(vertex, tenant_a, admin_a) -> None:
    first = lifecycle.cache_create(
        tenant=tenant_a, actor=actor_for(admin_a), spec=_spec(), idempotency_key="k-123"
    )
    replay = lifecycle.cache_create(
        tenant=tenant_a, actor=actor_for(admin_a), spec=_spec(), idempotency_key="k-123"
    )
    assert replay.operation.pk == first.operation.pk and not replay.created
    with pytest.raises(IdempotencyKeyReused):
        lifecycle.cache_create(
            tenant=tenant_a,
            actor=actor_for(admin_a),
            spec=_spec(content=big_content("other")),
            idempotency_key="k-123",
        )


@pytest.mark.parametrize(
    ("overrides", "error", "detail"),
    [
        ({"ttl_seconds": 0}, InvalidTtl, None),
        ({"ttl_seconds": 10**9}, InvalidTtl, None),
        ({"model": "gemini-0-imaginary"}, UnknownModel, None),
        ({"content": {"system_instruction": "tiny"}}, BelowMinimumTokens, "minimum"),
        ({"prewarm_cron": "61 * * * *"}, InvalidCron, None),
        (
            {"content": {"documents": [{"id": "d", "uri": "gs://evil-bucket/x.pdf"}]}},
            GcsUriNotAllowed,
            None,
        ),
    ],
)
def test_bad_input_is_refused_before_anything_is_written_or_sent(
    vertex, tenant_a, admin_a, overrides, error, detail
) -> None:
    with pytest.raises(error) as raised:
        _create(tenant_a, admin_a, **overrides)
    if detail:
        assert raised.value.details[detail] == 1024
        assert "1024" in raised.value.message
    assert (
        not CacheObject.objects.all_tenants().exists()
        and not CacheOperation.objects.all_tenants().exists()
    )
    assert not AuditEvent.objects.filter(action="caches.cache.create").exists()
    assert vertex.requests() == []


def test_oversized_content_is_refused(vertex, tenant_a, admin_a, settings) -> None:
    settings.CACHEPLANE_CACHE_MAX_CONTENT_BYTES = 4096
    with pytest.raises(ContentTooLarge):
        _create(tenant_a, admin_a)
    assert vertex.requests() == []


def test_gcs_uris_from_the_allow_list_are_sent_as_file_data(vertex, tenant_a, admin_a) -> None:
    TenantCacheSettings.objects.create(tenant=tenant_a, gcs_bucket_allow_list=["acme-docs"])
    content = big_content()
    content["documents"].append(
        {"id": "zz-pdf", "uri": "gs://acme-docs/msa.pdf", "mime_type": "application/pdf"}
    )
    cache = _run(_create(tenant_a, admin_a, content=content))
    assert cache.state == CacheState.ACTIVE
    parts = vertex.create_requests()[0].body["contents"][0]["parts"]
    file_data = parts[-1]["fileData"]  # the SDK sends the inner fields in snake_case
    assert (file_data.get("fileUri") or file_data.get("file_uri")) == "gs://acme-docs/msa.pdf"


def test_tenant_with_its_own_project_gets_caches_there(vertex, tenant_a, admin_a) -> None:
    TenantCacheSettings.objects.create(
        tenant=tenant_a, vertex_project="acme-gcp", vertex_location="europe-west4"
    )
    cache = _run(_create(tenant_a, admin_a))
    assert cache.remote_name.startswith("projects/acme-gcp/locations/europe-west4/")


def test_rate_limited_provider_is_retried_by_the_task_one_request_per_attempt(
    vertex, tenant_a, admin_a
) -> None:
    from caches.tasks import cache_operation_execute_task

    vertex.inject_fault(429, count=2, methods=["POST"], path_contains="cachedContents")
    outcome = _create(tenant_a, admin_a)
    # Eager apply runs Celery's retries inline (the countdown is skipped, not the policy).
    cache_operation_execute_task.apply(args=[str(outcome.operation.pk)])
    op = CacheOperation.objects.all_tenants().get(pk=outcome.operation.pk)
    assert op.status == OperationStatus.SUCCEEDED and op.attempts == 3
    assert len(vertex.create_requests()) == 3  # no SDK retries stacked under the task's
    assert len(vertex.stored_caches()) == 1
    assert CacheObject.objects.all_tenants().get(pk=op.cache_id).state == CacheState.ACTIVE


def test_a_transient_failure_is_one_request_and_leaves_the_operation_for_a_task_retry(
    vertex, tenant_a, admin_a
) -> None:
    vertex.inject_fault(503, count=1, methods=["POST"], path_contains="cachedContents")
    outcome = _create(tenant_a, admin_a)
    with pytest.raises(TransientProviderError):
        operation_execute(operation_id=str(outcome.operation.pk))
    assert len(vertex.create_requests()) == 1
    op = CacheOperation.objects.all_tenants().get(pk=outcome.operation.pk)
    assert op.status == OperationStatus.PENDING and op.error_code == "provider_unavailable"
    assert operation_execute(operation_id=str(outcome.operation.pk)) == "succeeded"
    assert CacheObject.objects.all_tenants().get(pk=op.cache_id).state == CacheState.ACTIVE


def test_transient_failures_stop_at_the_operation_attempt_bound(
    vertex, tenant_a, admin_a, settings
) -> None:
    from caches.tasks import cache_operation_execute_task

    settings.CACHEPLANE_OPERATION_MAX_ATTEMPTS = 3
    vertex.inject_fault(503, count=None, methods=["POST"], path_contains="cachedContents")
    outcome = _create(tenant_a, admin_a)
    cache_operation_execute_task.apply(args=[str(outcome.operation.pk)])
    op = CacheOperation.objects.all_tenants().get(pk=outcome.operation.pk)
    assert (op.status, op.error_code, op.attempts) == ("failed", "attempts_exhausted", 3)
    assert len(vertex.create_requests()) == 3  # the product of the policy: 3 attempts x 1
    assert CacheObject.objects.all_tenants().get(pk=op.cache_id).state == CacheState.FAILED


def test_provider_minimum_token_400_fails_the_cache_with_its_numbers(
    vertex, tenant_a, admin_a
) -> None:
    vertex.catalog.set_model("gemini-2.5-flash", 50_000)  # the server is stricter
    cache = _run(_create(tenant_a, admin_a))
    assert cache.state == CacheState.FAILED
    assert cache.last_error_code == "below_minimum_tokens"
    assert "50000" in cache.last_error


def test_extend_ttl_patches_the_remote_and_moves_expiry(vertex, tenant_a, admin_a) -> None:
    cache = _run(_create(tenant_a, admin_a))
    op = lifecycle.cache_extend_ttl(cache=cache, actor=actor_for(admin_a), ttl_seconds=7200)
    assert operation_execute(operation_id=str(op.pk)) == "succeeded"
    cache.refresh_from_db()
    assert cache.state == CacheState.ACTIVE and cache.ttl_seconds == 7200
    patch = vertex.requests(method="PATCH")[0]
    assert patch.body == {"ttl": "7200s"}
    assert abs((cache.expire_at - timezone.now()) - timedelta(hours=2)) < timedelta(minutes=1)


def _execute_in_thread(operation_id: str) -> str | None:
    try:
        return operation_execute(operation_id=operation_id)
    finally:
        connection.close()  # this thread's own connection


@pytest.mark.django_db(transaction=True)
def test_an_eviction_while_a_refresh_is_at_the_provider_wins_and_closes_the_refresh(
    vertex, tenant_a, admin_a
) -> None:
    """The refresh's answer must not move an evicting cache back to active (that raised,
    and left the refresh running until its lease ran out)."""
    actor = actor_for(admin_a)
    cache = _run(_create(tenant_a, admin_a))
    refresh = lifecycle.cache_extend_ttl(cache=cache, actor=actor, ttl_seconds=7200)
    vertex.set_latency(1000)  # the PATCH is at the provider while the eviction comes in
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(_execute_in_thread, str(refresh.pk))
        wait_for(
            lambda: (
                CacheOperation.objects.all_tenants().get(pk=refresh.pk).status
                == OperationStatus.RUNNING
            ),
            10,
            "the refresh to be claimed",
        )
        current = CacheObject.objects.all_tenants().get(pk=cache.pk)
        evict = lifecycle.cache_evict(cache=current, actor=actor)
        assert running.result(timeout=30) == OperationStatus.SUCCEEDED
    vertex.set_latency(0)
    refresh.refresh_from_db()
    cache.refresh_from_db()
    assert (refresh.status, refresh.error_code) == (OperationStatus.SUCCEEDED, "superseded")
    assert refresh.finished_at is not None and refresh.lease_until is None
    assert cache.state == CacheState.EVICTING
    assert operation_execute(operation_id=str(evict.pk)) == OperationStatus.SUCCEEDED
    cache.refresh_from_db()
    assert cache.state == CacheState.EVICTED and vertex.stored_caches() == []


def test_evict_deletes_the_remote_and_is_idempotent(vertex, tenant_a, admin_a) -> None:
    cache = _run(_create(tenant_a, admin_a))
    op = lifecycle.cache_evict(cache=cache, actor=actor_for(admin_a))
    assert lifecycle.cache_evict(cache=cache, actor=actor_for(admin_a)).pk == op.pk
    operation_execute(operation_id=str(op.pk))
    cache.refresh_from_db()
    assert cache.state == CacheState.EVICTED and cache.ended_at is not None
    assert vertex.stored_caches() == []
    assert AuditEvent.objects.filter(action="caches.cache.evicted").exists()


def test_remote_deleted_behind_our_back_is_marked_expired_by_reconciliation(
    vertex, tenant_a, admin_a
) -> None:
    from caches.providers.vertex_emulator.sdk_client import genai_client_for

    cache = _run(_create(tenant_a, admin_a))
    client = genai_client_for(vertex.base_url)  # keep a reference: GC closes its transport
    client.caches.delete(name=cache.remote_name)
    run = reconcile.reconcile_vertex_scope(project="p1", location="us-central1")
    cache.refresh_from_db()
    assert cache.state == CacheState.EXPIRED
    assert (run.checked, run.expired) == (1, 1)


def test_orphans_with_our_prefix_are_reported_or_deleted_by_policy(
    vertex, tenant_a, admin_a, settings
) -> None:
    from caches.providers.vertex_emulator.sdk_client import genai_client_for

    client = genai_client_for(vertex.base_url)
    client.caches.create(
        model="gemini-2.5-flash",
        config={
            "display_name": "cacheplane-00000000-0000-0000-0000-000000000000",
            "system_instruction": "x " * 3000,
            "ttl": "600s",
        },
    )
    client.caches.create(
        model="gemini-2.5-flash",
        config={"display_name": "someone-else", "system_instruction": "y " * 3000, "ttl": "600s"},
    )
    run = reconcile.reconcile_vertex_scope(project="p1", location="us-central1")
    assert len(run.errors) == 1 and run.deleted_orphans == 0
    settings.CACHEPLANE_RECONCILE_ORPHANS = "delete"
    run = reconcile.reconcile_vertex_scope(project="p1", location="us-central1")
    assert run.deleted_orphans == 1
    assert [c.display_name for c in vertex.stored_caches()] == ["someone-else"]


def test_sweeper_expires_only_due_caches(vertex, tenant_a, admin_a) -> None:
    due = _run(_create(tenant_a, admin_a, name="due"))
    later = _run(_create(tenant_a, admin_a, name="later", content=big_content("later")))
    CacheObject.objects.all_tenants().filter(pk=due.pk).update(
        expire_at=timezone.now() - timedelta(seconds=1)
    )
    assert scheduling.cache_expire_due() == 1
    due.refresh_from_db(), later.refresh_from_db()
    assert (due.state, later.state) == (CacheState.EXPIRED, CacheState.ACTIVE)
    assert scheduling.cache_expire_due() == 0  # running it again changes nothing


def test_sliding_cache_used_recently_is_extended_unused_one_is_left_to_expire(
    vertex, tenant_a, admin_a
) -> None:
    used = _run(_create(tenant_a, admin_a, name="used", ttl_policy=TtlPolicy.SLIDING))
    idle = _run(
        _create(
            tenant_a,
            admin_a,
            name="idle",
            ttl_policy=TtlPolicy.SLIDING,
            content=big_content("idle"),
        )
    )
    now = timezone.now()
    CacheObject.objects.all_tenants().filter(pk__in=[used.pk, idle.pk]).update(next_refresh_at=now)
    CacheObject.objects.all_tenants().filter(pk=used.pk).update(last_hit_at=now)
    assert scheduling.cache_enqueue_due_refreshes() == 2
    refresh_ops = CacheOperation.objects.all_tenants().filter(kind="refresh")
    assert [op.cache_id for op in refresh_ops] == [used.pk]
    operation_execute(operation_id=str(refresh_ops[0].pk))
    assert len(vertex.requests(method="PATCH")) == 1


def test_prewarm_cron_schedules_a_refresh_and_the_next_run(vertex, tenant_a, admin_a) -> None:
    cache = _run(_create(tenant_a, admin_a, prewarm_cron="0 7 * * 1-5"))
    assert cache.next_prewarm_at is not None and cache.next_prewarm_at.hour == 7
    CacheObject.objects.all_tenants().filter(pk=cache.pk).update(next_prewarm_at=timezone.now())
    scheduling.cache_enqueue_due_refreshes()
    op = CacheOperation.objects.all_tenants().get(kind="refresh")
    assert op.params["reason"] == "pre-warm"
    cache.refresh_from_db()
    assert cache.next_prewarm_at > timezone.now()
