"""Workers registered completely from every path: service, REST (platform), console form.

Engine, version, KV-events endpoint, hash seed, tokenizer, pool and a sealed API key; an
endpoint vLLM would connect to (rather than bind) is refused with the reason, and nothing
is written; what the routing can do with each worker is reported with its reason.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from audit.models import AuditEvent
from tenants.actor import Actor
from workers.hash_config import salt_form, worker_hash_spec
from workers.models import Worker
from workers.secrets import unseal
from workers.services import WorkerRegistrationInvalid, kv_events_problem, worker_register

pytestmark = pytest.mark.django_db

VLLM = {
    "name": "gpu-1",
    "base_url": "http://10.0.0.5:8000",
    "model": "meta/llama",
    "pool": "a100",
    "engine": "vllm",
    "engine_version": "0.32.0",
    "kv_events_endpoint": "tcp://*:5557,tcp://*:5558",
    "hash_seed": "0",
    "tokenizer": "/models/llama",
}


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp://10.0.0.5:5557",
        "tcp://0.0.0.0:5557",  # vLLM connects: no "*" in it
        "tcp://10.0.0.5:5557,tcp://*:5558",
        "http://x:1",
        "a,b,c",
    ],
)
def test_an_endpoint_vllm_would_connect_to_or_not_zmq_is_refused_and_nothing_written(endpoint):
    with pytest.raises(WorkerRegistrationInvalid) as refused:
        worker_register(actor=Actor.cli(), **{**VLLM, "kv_events_endpoint": endpoint})
    assert refused.value.code == "worker_registration_invalid"
    assert not Worker.objects.exists()
    assert not AuditEvent.objects.filter(action="workers.worker.register").exists()


def test_the_connect_rule_names_the_fix():
    problem = kv_events_problem("tcp://10.0.0.5:5557")
    assert "connects" in problem and "tcp://*:5557" in problem
    assert kv_events_problem("tcp://*:5557,tcp://*:5558") == ""
    assert kv_events_problem("ipc:///tmp/kv") == ""
    assert kv_events_problem("tcp://[::]:5557") == ""


def test_rest_registration_is_for_platform_admins_and_never_returns_the_key(
    api, platform_admin, admin_a
):
    api.force_authenticate(admin_a)
    assert api.post("/api/v1/platform/workers", VLLM, format="json").status_code == 403
    assert not Worker.objects.exists()
    api.force_authenticate(platform_admin)
    reply = api.post(
        "/api/v1/platform/workers", {**VLLM, "api_key": "sk-very-secret"}, format="json"
    )
    assert reply.status_code == 201, reply.content
    assert b"sk-very-secret" not in reply.content
    body = reply.json()
    assert body["has_api_key"] is True and "api_key" not in body
    assert (body["engine"], body["engine_version"], body["pool"]) == ("vllm", "0.32.0", "a100")
    # Not probed yet: its hash algorithm is unknown, so it is routed approximately.
    assert body["routing"] == {"mode": "approximate", "reason": "not_probed"}
    worker = Worker.objects.get(name="gpu-1")
    assert "sk-very-secret" not in worker.api_key_sealed
    assert unseal(worker.api_key_sealed) == "sk-very-secret"
    event = AuditEvent.objects.filter(action="workers.worker.register").latest("seq")
    assert event.changes["api_key_sealed"]["after"] == "[redacted]"
    assert "sk-very-secret" not in str(event.changes)
    detail = api.get("/api/v1/platform/workers/gpu-1")
    assert detail.status_code == 200 and b"sk-very-secret" not in detail.content
    assert api.get("/api/v1/platform/workers/nope").status_code == 404


def test_rest_registration_refuses_a_connecting_endpoint_with_its_code(api, platform_admin):
    api.force_authenticate(platform_admin)
    reply = api.post(
        "/api/v1/platform/workers",
        {**VLLM, "kv_events_endpoint": "tcp://10.0.0.5:5557"},
        format="json",
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "worker_registration_invalid"
    assert not Worker.objects.exists()


def test_console_form_records_a_vllm_worker_as_vllm_with_everything(platform_admin):
    client = Client()
    client.force_login(platform_admin)
    reply = client.post(
        "/platform/workers/register", {**VLLM, "api_key": "sk-console", "dev_mode": "on"}
    )
    assert reply.status_code in (302, 303), reply.content.decode()[:500]
    worker = Worker.objects.get(name="gpu-1")
    assert (worker.engine, worker.engine_version, worker.pool) == ("vllm", "0.32.0", "a100")
    assert worker.kv_events_endpoint == "tcp://*:5557,tcp://*:5558"
    assert worker.tokenizer == "/models/llama" and worker.dev_mode
    assert unseal(worker.api_key_sealed) == "sk-console"
    # Registering again with a blank key keeps the stored one.
    client.post("/platform/workers/register", {**VLLM, "api_key": ""})
    assert unseal(Worker.objects.get(name="gpu-1").api_key_sealed) == "sk-console"
    page = client.get("/platform/workers/").content.decode()
    assert "sk-console" not in page
    assert "approximate: its hash algorithm is not known yet" in page


def test_a_worker_is_routed_exactly_only_when_every_hash_input_is_known():
    worker = worker_register(actor=Actor.cli(), **{**VLLM, "tokenizer": ""})
    assert worker_hash_spec(worker) == (None, "no_tokenizer")
    worker.tokenizer, worker.hash_algo = "/models/llama", "sha256_cbor"
    worker.block_size = 128
    spec, reason = worker_hash_spec(worker)
    assert reason == "" and spec is not None
    assert (spec.block_size, spec.algo, spec.seed, spec.salt_form) == (
        128,
        "sha256_cbor",
        "0",
        "tagged",
    )
    worker.hash_seed = ""  # PYTHONHASHSEED unset: vLLM 0.32 uses its fixed default seed
    assert worker_hash_spec(worker)[0].seed == "vllm-none-hash"
    worker.engine_version = "0.26.1"  # earlier releases seeded from random bytes
    assert worker_hash_spec(worker) == (None, "hash_seed_unknown")
    worker.hash_seed, worker.hash_algo = "0", "xxhash"
    assert worker_hash_spec(worker) == (None, "unsupported_hash_algo")


def test_releases_before_the_tagged_salt_key_hash_the_bare_salt():
    assert salt_form(engine="vllm", version="0.32.0") == "tagged"
    assert salt_form(engine="vllm", version="0.11.2") == "bare"
    assert salt_form(engine="vllm", version="") == "tagged"
    assert salt_form(engine="reference", version="0.1.0") == "tagged"


def test_the_workers_page_says_whose_events_stopped_arriving_and_whose_hashes_do_not_match(
    redis_flush, platform_admin
):
    import time

    from workers import kv_index

    worker_register(actor=Actor.cli(), **VLLM)
    worker_register(
        actor=Actor.cli(), **{**VLLM, "name": "gpu-2", "base_url": "http://10.0.0.6:8000"}
    )
    worker_register(
        actor=Actor.cli(), **{**VLLM, "name": "gpu-3", "base_url": "http://10.0.0.7:8000"}
    )
    # What the KV indexer writes: gpu-1's last event 10 minutes ago, gpu-2 live but its
    # published hashes disagree with ours, gpu-3 live and right.
    kv_index.mark_live(redis_flush, workers=["gpu-1"], now=time.time() - 600)
    kv_index.mark_live(redis_flush, workers=["gpu-2", "gpu-3"])
    kv_index.record_hash_check(redis_flush, worker="gpu-2", matched=3, mismatched=2)
    kv_index.record_hash_check(redis_flush, worker="gpu-3", matched=5, mismatched=0)
    client = Client()
    client.force_login(platform_admin)
    page = client.get("/platform/workers/").content.decode()
    assert re.search(r"events warn\">not arriving \(last 6\d\d s ago\)", page)
    assert 'events warn">hashes do not match (2 of 5 checked): routed approximately' in page
    assert 'events">live, 0 blocks indexed' in page
