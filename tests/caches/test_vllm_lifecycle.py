"""Cache objects pinned on vLLM-protocol workers (the embedded reference worker)."""

from __future__ import annotations

import contextlib

import httpx
import pytest

from caches.errors import UnknownModel
from caches.models import CacheObject, CacheOperation, CacheState
from caches.providers.base import TransientProviderError
from caches.services import lifecycle
from caches.services.execution import operation_execute
from tenants.salt import tenant_cache_salt
from tenants.services.tenants import tenant_rotate_cache_salt
from tests.factories import actor_for
from tests.workers.engine.support import tiny_config
from workers.engine.launcher import serve
from workers.models import Worker

pytestmark = pytest.mark.django_db
MODEL = "test/ref-tiny"
CONTENT = {
    "system_instruction": "You are the support agent of Globex. " * 6,
    "documents": [{"id": "faq", "chunk": 0, "text": "Refunds take five business days. " * 4}],
}


@pytest.fixture
def workers(db):
    """Two reference workers registered in the control plane."""
    with contextlib.ExitStack() as stack:
        rows = []
        for n in range(2):
            running = stack.enter_context(
                serve(
                    tiny_config(
                        num_blocks=256, max_model_len=1024, enable_prompt_tokens_details=True
                    )
                )
            )
            rows.append(
                Worker.objects.create(
                    name=f"w{n}", base_url=running.base_url, model=MODEL, block_size=16
                )
            )
        yield rows


def _create(tenant, admin, **overrides):
    values = {
        "name": "support",
        "provider": "vllm",
        "model": MODEL,
        "content": CONTENT,
        "ttl_seconds": 900,
    }
    values.update(overrides)
    outcome = lifecycle.cache_create(
        tenant=tenant, actor=actor_for(admin), spec=lifecycle.CacheSpec(**values)
    )
    operation_execute(operation_id=str(outcome.operation.pk))
    return CacheObject.objects.all_tenants().get(pk=outcome.operation.cache_id)


def _probe(worker: Worker, prefix: str, salt: str) -> int:
    """A chat request led by the cache's system message, as the gateway sends it."""
    messages = [
        {"role": "system", "content": prefix},
        {"role": "user", "content": "Where is my refund?"},
    ]
    response = httpx.post(
        f"{worker.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": messages, "max_tokens": 1, "cache_salt": salt},
    )
    details = response.json()["usage"]["prompt_tokens_details"]
    return (details or {}).get("cached_tokens") or 0


def _refresh(cache: CacheObject, admin) -> CacheObject:
    op = lifecycle.cache_extend_ttl(cache=cache, actor=actor_for(admin), ttl_seconds=900)
    operation_execute(operation_id=str(op.pk))
    return CacheObject.objects.all_tenants().get(pk=cache.pk)


def test_create_warms_the_prefix_on_the_routed_worker(workers, tenant_a, admin_a) -> None:
    cache = _create(tenant_a, admin_a)
    assert cache.state == CacheState.ACTIVE
    assert len(cache.placement) == 1 and cache.placement[0] in {"w0", "w1"}
    assert cache.token_count and cache.token_count > 200
    worker = Worker.objects.get(name=cache.placement[0])
    from caches.content import CacheContent

    prefix = CacheContent.from_dict(cache.content).render_prefix()
    cached = _probe(worker, prefix, tenant_cache_salt(tenant_a))
    assert cached >= (cache.token_count // 16 - 1) * 16  # the whole prefix, block-aligned


def test_refresh_confirms_residency(workers, tenant_a, admin_a) -> None:
    cache = _refresh(_create(tenant_a, admin_a), admin_a)
    transition = cache.transitions.order_by("-at", "-id").first()
    assert cache.state == CacheState.ACTIVE
    assert "resident" in transition.reason
    assert int(transition.reason.split("resident: ")[1].split()[0]) > 0


def test_replication_factor_warms_several_workers(workers, tenant_a, admin_a) -> None:
    cache = _create(tenant_a, admin_a, replication_factor=2)
    assert sorted(cache.placement) == ["w0", "w1"]


def test_another_tenants_identical_prompt_never_hits_the_cached_blocks(
    workers, tenant_a, tenant_b, admin_a
) -> None:
    from caches.content import CacheContent

    cache = _create(tenant_a, admin_a)
    worker = Worker.objects.get(name=cache.placement[0])
    prefix = CacheContent.from_dict(CONTENT).render_prefix()
    assert tenant_cache_salt(tenant_a) != tenant_cache_salt(tenant_b)
    assert _probe(worker, prefix, tenant_cache_salt(tenant_b)) == 0
    assert _probe(worker, prefix, tenant_cache_salt(tenant_a)) > 0


def test_rotating_the_salt_makes_the_tenants_blocks_unreachable_at_once(
    workers, tenant_a, admin_a
) -> None:
    from caches.content import CacheContent

    cache = _create(tenant_a, admin_a)
    worker = Worker.objects.get(name=cache.placement[0])
    prefix = CacheContent.from_dict(CONTENT).render_prefix()
    old_salt = tenant_cache_salt(tenant_a)
    tenant_rotate_cache_salt(actor=actor_for(admin_a), tenant=tenant_a)
    tenant_a.refresh_from_db()
    new_salt = tenant_cache_salt(tenant_a)
    assert new_salt != old_salt
    cache = _refresh(cache, admin_a)  # the probe under the new salt misses, and re-warms
    assert "resident: 0 cached tokens" in cache.transitions.order_by("-at", "-id").first().reason
    assert _probe(worker, prefix, new_salt) > 0


def test_model_without_workers_is_refused_up_front(workers, tenant_a, admin_a) -> None:
    with pytest.raises(UnknownModel):
        _create(tenant_a, admin_a, model="meta-llama/Llama-3.1-8B-Instruct")
    assert not CacheObject.objects.all_tenants().exists()


def test_unreachable_workers_are_a_transient_error(workers, tenant_a, admin_a) -> None:
    for n, worker in enumerate(Worker.objects.all()):
        worker.base_url = f"http://127.0.0.{n + 1}:9"  # nothing listens on port 9
        worker.save()
    outcome = lifecycle.cache_create(
        tenant=tenant_a,
        actor=actor_for(admin_a),
        spec=lifecycle.CacheSpec(name="s", provider="vllm", model=MODEL, content=CONTENT),
    )
    with pytest.raises(TransientProviderError):
        operation_execute(operation_id=str(outcome.operation.pk))
    assert CacheOperation.objects.all_tenants().get(pk=outcome.operation.pk).status == "pending"


def _pin(cache: CacheObject) -> CacheObject:
    """What the scheduler does every pin interval: a refresh nobody asked for."""
    from django.utils import timezone

    from caches.services.scheduling import cache_enqueue_due_refreshes

    CacheObject.objects.all_tenants().filter(pk=cache.pk).update(next_refresh_at=timezone.now())
    assert cache_enqueue_due_refreshes() == 1
    op = (
        CacheOperation.objects.all_tenants()
        .filter(cache=cache, requested_by__isnull=True)
        .latest("created_at")
    )
    assert operation_execute(operation_id=str(op.pk)) == "succeeded"
    assert operation_execute(operation_id=str(op.pk)) is None  # run twice: a no-op
    return CacheObject.objects.all_tenants().get(pk=cache.pk)


def test_a_pin_that_changes_nothing_writes_no_timeline_entry_and_no_audit_event(
    workers, tenant_a, admin_a
) -> None:
    from audit.models import AuditEvent

    cache = _create(tenant_a, admin_a)
    transitions, events = cache.transitions.count(), AuditEvent.objects.count()
    first_expiry = cache.expire_at
    for _ in range(3):
        cache = _pin(cache)
    assert cache.state == CacheState.ACTIVE
    # A fixed cache: pins keep it resident, its expiry stays (tests/caches/test_vllm_pins.py).
    assert cache.expire_at == first_expiry and cache.next_refresh_at is not None
    assert cache.transitions.count() == transitions
    assert AuditEvent.objects.count() == events


def test_a_pin_that_recounts_the_prefix_writes_one_coalesced_record(
    workers, tenant_a, admin_a
) -> None:
    from audit.models import AuditEvent

    cache = _create(tenant_a, admin_a)
    counted = cache.token_count
    CacheObject.objects.all_tenants().filter(pk=cache.pk).update(token_count=1)
    transitions, events = cache.transitions.count(), AuditEvent.objects.count()
    cache = _pin(cache)
    assert cache.token_count == counted
    assert cache.transitions.count() == transitions + 1
    latest = cache.transitions.order_by("-at", "-id").first()
    assert (latest.from_state, latest.to_state) == ("active", "active")
    event = AuditEvent.objects.order_by("-occurred_at", "-seq").first()
    assert AuditEvent.objects.count() == events + 1
    assert event.action == "caches.cache.update"
    assert set(event.changes) == {"token_count"}  # values: the audit redaction decides
