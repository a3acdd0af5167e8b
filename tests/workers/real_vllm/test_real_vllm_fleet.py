"""Cacheplane's vLLM paths against two real vLLM servers (registration to routing).

Registration over REST records what real vLLM reports (version, block size, hash algorithm)
and keeps the API key sealed; the KV indexer indexes the registered workers from the
registry, checks their hashes and follows a restart through replay; the gateway routes a
repeated salted prefix to the instance that holds it, gets vLLM's cached tokens, and a
different tenant is cold on the same instance.
"""

from __future__ import annotations

import time

import openai
import pytest
import redis as redis_lib
from django.conf import settings

from audit.models import AuditEvent
from tests.workers.real_vllm.support import long_text
from workers import kv_index
from workers.kv_indexer import IndexerThread, registry_sources
from workers.models import Worker
from workers.services import worker_probe

pytestmark = [pytest.mark.real_vllm, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _register(api, platform_admin, server, tiny_model, **extra):
    api.force_authenticate(platform_admin)
    body = {
        "name": server.name,
        "base_url": server.base_url,
        "model": "tiny",
        "engine": "vllm",
        "kv_events_endpoint": server.events_endpoint,
        "hash_seed": "0",
        "tokenizer": str(tiny_model),
        **extra,
    }
    return api.post("/api/v1/platform/workers", body, format="json")


def _wait(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.2)  # polling another process's state


def test_rest_registration_records_what_real_vllm_reports_and_seals_the_key(
    api, platform_admin, vllm_pair, tiny_model
):
    server = vllm_pair[0]
    reply = _register(api, platform_admin, server, tiny_model, api_key="sk-worker-secret")
    assert reply.status_code == 201, reply.content
    assert b"sk-worker-secret" not in reply.content and reply.json()["has_api_key"] is True
    worker = worker_probe(worker=Worker.objects.get(name=server.name))
    assert worker.state == "healthy", worker.metrics
    assert worker.engine == "vllm" and worker.engine_version.startswith("0.32")
    assert (worker.block_size, worker.hash_algo) == (128, "sha256_cbor")
    assert worker.num_blocks and worker.num_blocks > 100
    assert "sk-worker-secret" not in worker.api_key_sealed
    event = AuditEvent.objects.filter(action="workers.worker.register").latest("seq")
    assert event.changes["api_key_sealed"]["after"] == "[redacted]"
    detail = api.get(f"/api/v1/platform/workers/{server.name}").json()
    assert detail["routing"] == {"mode": "exact", "reason": ""}
    assert "api_key" not in detail and "api_key_sealed" not in detail


def test_an_endpoint_vllm_would_connect_to_is_refused_and_nothing_is_written(
    api, platform_admin, vllm_pair, tiny_model
):
    reply = _register(
        api, platform_admin, vllm_pair[1], tiny_model, kv_events_endpoint="tcp://127.0.0.1:5557"
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "worker_registration_invalid"
    assert "connects" in reply.json()["error"]["message"]
    assert not Worker.objects.filter(name=vllm_pair[1].name).exists()


@pytest.fixture
def fleet(api, platform_admin, vllm_pair, tiny_model, fresh_gateway, redis_flush):
    """Both servers registered and probed, the KV indexer running from the registry."""
    for server in vllm_pair:
        assert _register(api, platform_admin, server, tiny_model).status_code == 201
        worker_probe(worker=Worker.objects.get(name=server.name))
    # Every registered worker is subscribed to with the hash spec its events are checked by.
    assert sorted((s.worker, s.spec is not None) for s in registry_sources()) == [
        (s.name, True) for s in vllm_pair
    ]
    client = redis_lib.Redis.from_url(settings.REDIS_URL)
    indexer = IndexerThread(redis=client, sources=registry_sources).start()
    names = [s.name for s in vllm_pair]
    _wait(
        lambda: all(s["live"] for s in kv_index.worker_event_status(client, workers=names).values())
    )
    yield {"servers": vllm_pair, "redis": client, "indexer": indexer}
    indexer.stop()


def _ask(url: str, key: str, system: str, question: str):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model="tiny",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        max_tokens=2,
    )


def test_gateway_routes_a_repeated_salted_prefix_to_its_real_holder(
    fleet, live_server_url, tenant_keys
):
    acme, globex = tenant_keys["gw-acme"]["key"], tenant_keys["gw-globex"]["key"]
    system = long_text(4242, words=400)
    first = _ask(live_server_url, acme, system, "first question")
    holder = first.headers["x-cacheplane-worker"]
    # The holder's BlockStored events reach the index (confirming the placement).
    _wait(
        lambda: (
            kv_index.worker_event_status(fleet["redis"], workers=[holder])[holder][
                "resident_blocks"
            ]
            > 0
        )
    )
    hits, seen = 0, []
    exact_before = _exact_decisions()
    for n in range(8):
        again = _ask(live_server_url, acme, system, f"follow-up {n}")
        hits += again.headers["x-cacheplane-worker"] == holder
        usage = again.parse().usage
        details = usage.prompt_tokens_details
        assert details is not None and details.cached_tokens >= 128  # vLLM's own count
        seen.append((again.headers["x-cacheplane-ledger-key"], usage, details.cached_tokens))
    assert hits == 8
    # Each follow-up was placed by the KV-event index (vLLM's own hashes), not the guess.
    assert _exact_decisions() - exact_before == 8
    # The ledger books what real vLLM reported, under the gateway's own keys.
    rows = _ledger_rows(tenant_keys["gw-acme"]["tenant"], [key for key, _, _ in seen])
    for key, usage, cached in seen:
        row = rows[key]
        assert (row.worker, row.provider, row.prompt_tokens, row.cached_read_tokens) == (
            holder,
            "vllm",
            usage.prompt_tokens,
            cached,
        )
        assert row.output_tokens == usage.completion_tokens
        assert row.route == "exact:fresh"  # and the request log says so
    # Another tenant, same prompt: its salt makes every block different: cold.
    other = _ask(live_server_url, globex, system, "first question")
    details = other.parse().usage.prompt_tokens_details
    assert details is None or not details.cached_tokens
    checked = kv_index.worker_event_status(fleet["redis"], workers=[holder])[holder]
    assert checked["hash_bad"] == 0  # the indexer's own check never saw a mismatch


def _exact_decisions() -> float:
    """Routing decisions the gateway (served in this process) made from the KV index."""
    from prometheus_client import REGISTRY

    return sum(
        sample.value
        for family in REGISTRY.collect()
        if family.name == "cacheplane_gateway_route"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("mode") == "exact"
    )


def _ledger_rows(tenant, keys: list[str]) -> dict:
    """The ledger rows of ``keys`` once the usage flush has booked them all."""
    from billing.models import UsageRecord
    from billing.services.usage import usage_flush

    def booked() -> bool:
        usage_flush()
        return UsageRecord.objects.filter(tenant=tenant, request_id__in=keys).count() == len(keys)

    _wait(booked, timeout=30)
    return {r.request_id: r for r in UsageRecord.objects.filter(tenant=tenant, request_id__in=keys)}


def test_a_restarted_worker_is_reset_in_the_index_and_followed_again(fleet):
    server = fleet["servers"][1]
    client = fleet["redis"]
    import httpx

    httpx.post(
        f"{server.base_url}/v1/completions",
        json={"model": "tiny", "prompt": long_text(77, 300), "max_tokens": 1},
        timeout=120,
    ).raise_for_status()
    status = lambda: kv_index.worker_event_status(client, workers=[server.name])[server.name]  # noqa: E731
    _wait(lambda: status()["resident_blocks"] > 0)
    server.restart()  # vLLM numbers its batches from 0 again and its cache is empty
    httpx.post(
        f"{server.base_url}/v1/completions",
        json={"model": "tiny", "prompt": long_text(78, 300), "max_tokens": 1},
        timeout=120,
    ).raise_for_status()
    stats = fleet["indexer"].indexer.streams[server.name].stats
    _wait(lambda: stats["resets"] >= 1 and status()["live"])
    assert status()["resident_blocks"] > 0  # the new blocks, after the reset


def test_an_indexer_started_after_the_worker_published_replays_what_it_missed(fleet):
    import httpx

    server = fleet["servers"][0]
    client = fleet["redis"]
    fleet["indexer"].stop()  # nobody listens while vLLM publishes the next batches
    httpx.post(
        f"{server.base_url}/v1/completions",
        json={"model": "tiny", "prompt": long_text(91, 300), "max_tokens": 1},
        timeout=120,
    ).raise_for_status()
    late = IndexerThread(redis=client, sources=registry_sources).start()
    try:
        # The first live batch the late indexer sees has seq > 0: it asks vLLM's replay
        # socket for everything before it, and applies it in order (no reset).
        _wait(lambda: server.name in late.indexer.streams)
        stats = late.indexer.streams[server.name].stats
        deadline = time.monotonic() + 60
        for n in range(92, 192):  # a SUB socket may miss batches until it has joined
            httpx.post(
                f"{server.base_url}/v1/completions",
                json={"model": "tiny", "prompt": long_text(n, 300), "max_tokens": 1},
                timeout=120,
            ).raise_for_status()
            if stats["replayed"] >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # polling the indexer thread, which applies what vLLM publishes
        assert stats["replayed"] >= 1
        # ... and then the live batch that revealed the gap (the indexer thread's next step).
        _wait(lambda: stats["batches"] > stats["replayed"])
        assert stats["resets"] == 0
    finally:
        late.stop()
