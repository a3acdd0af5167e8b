"""The Vertex emulator, driven through the real google-genai client (spec §1, §2.3–2.5).

Raw httpx is used only where the SDK hides the wire (status 200 ``{}`` on delete, a missing
Authorization header, update masks, the control endpoints).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from caches.providers.vertex_emulator import (
    VertexEmulator,
    estimate_cached_content_tokens,
    estimate_text_tokens,
    genai_client_for,
    running_vertex_emulator,
    token_fingerprint,
)
from caches.providers.vertex_emulator.rpc_errors import (
    CACHE_WITH_GENERATION_FIELDS_MESSAGE,
    RESOURCE_EXHAUSTED_MESSAGE,
)

PROJECT = "p1"
LOCATION = "us-central1"
MODEL = "gemini-2.5-flash"  # minimum 1024 tokens in the default table
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LONG_TEXT = "cacheplane keeps contexts warm. " * 160  # 5120 bytes -> 1280 tokens
NAME_RE = re.compile(rf"^{PARENT}/cachedContents/\d{{19}}$")
AUTH = {"Authorization": "Bearer test"}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, VertexEmulator]]:
    # A frozen clock: expiry is exact, and tests move time with advance_clock().
    emulator = VertexEmulator(clock=lambda: T0, id_seed=20261201)
    with running_vertex_emulator(emulator) as served:
        yield served


@pytest.fixture
def emulator(served: tuple[str, VertexEmulator]) -> VertexEmulator:
    served[1].reset()
    return served[1]


@pytest.fixture
def base_url(served: tuple[str, VertexEmulator], emulator: VertexEmulator) -> str:
    return served[0]


@pytest.fixture
def make_client(base_url: str) -> Iterator[Callable[..., genai.Client]]:
    """Build extra SDK clients (other tenants, retry options); all closed at teardown."""
    made: list[genai.Client] = []

    def make(**options: Any) -> genai.Client:
        options.setdefault("project", PROJECT)
        options.setdefault("location", LOCATION)
        made.append(genai_client_for(base_url, **options))
        return made[-1]

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., genai.Client]) -> genai.Client:
    return make_client()


@pytest.fixture
def raw(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url) as raw_client:
        yield raw_client


def create_cache(client: genai.Client, **config: object) -> types.CachedContent:
    config.setdefault("contents", [LONG_TEXT])
    return client.caches.create(model=MODEL, config=types.CreateCachedContentConfig(**config))


# -- CRUD ---------------------------------------------------------------------------------


def test_create_returns_server_computed_fields_and_stores_every_input(
    client: genai.Client, emulator: VertexEmulator
) -> None:
    tool = types.Tool(
        function_declarations=[types.FunctionDeclaration(name="lookup", description="Find.")]
    )
    cache = create_cache(
        client,
        system_instruction="Answer from the handbook.",
        tools=[tool],
        display_name="handbook",
        ttl="600s",
    )

    assert NAME_RE.match(cache.name)
    assert cache.model == f"{PARENT}/publishers/google/models/{MODEL}"
    assert cache.display_name == "handbook"
    assert cache.create_time == cache.update_time == T0
    assert cache.expire_time == T0 + timedelta(seconds=600)
    sent = emulator.create_requests()[0].body
    assert cache.usage_metadata.total_token_count == estimate_cached_content_tokens(
        system_instruction=sent["systemInstruction"], contents=sent["contents"], tools=sent["tools"]
    )
    stored = emulator.stored_cache(cache.name)
    assert stored is not None
    assert stored.contents == sent["contents"]
    assert stored.system_instruction == sent["systemInstruction"]
    assert stored.tools == [{"functionDeclarations": [{"name": "lookup", "description": "Find."}]}]


def test_create_without_ttl_or_expire_time_expires_in_sixty_minutes(client: genai.Client) -> None:
    cache = create_cache(client)

    assert cache.expire_time == T0 + timedelta(minutes=60)


def test_get_and_list_return_only_output_fields(client: genai.Client, raw: httpx.Client) -> None:
    cache = create_cache(client, system_instruction="secret rules", ttl="60s")

    got = raw.get(f"/v1/{cache.name}", headers=AUTH).json()
    listed = raw.get(f"/v1beta1/{PARENT}/cachedContents", headers=AUTH).json()

    output_fields = {"name", "model", "createTime", "updateTime", "expireTime", "usageMetadata"}
    assert set(got) == output_fields
    assert listed == {"cachedContents": [got]}
    assert client.caches.get(name=cache.name).expire_time == cache.expire_time


def test_list_pages_three_caches_over_two_pages(
    client: genai.Client, emulator: VertexEmulator, make_client: Callable[..., genai.Client]
) -> None:
    names = {create_cache(client).name for _ in range(3)}
    other_project = make_client(project="p2")
    create_cache(other_project)

    pager = client.caches.list(config=types.ListCachedContentsConfig(page_size=2))
    first_page = list(pager.page)
    listed = [cache.name for cache in pager]

    assert len(first_page) == 2
    assert sorted(listed) == sorted(names)
    calls = emulator.requests(method="GET", path_contains=f"{PARENT}/cachedContents")
    assert [call.query.get("pageSize") for call in calls] == ["2", "2"]
    assert "pageToken" not in calls[0].query and calls[1].query["pageToken"]


def test_page_size_above_1000_is_coerced_to_1000(
    emulator: VertexEmulator, raw: httpx.Client
) -> None:
    body = {"model": f"{PARENT}/publishers/google/models/{MODEL}", "contents": []}
    body["contents"] = [{"role": "user", "parts": [{"text": LONG_TEXT}]}]
    for _ in range(1001):
        emulator.caches.create(project=PROJECT, location=LOCATION, body=body, body_size=0)

    page = raw.get(f"/v1/{PARENT}/cachedContents", params={"pageSize": 5000}, headers=AUTH).json()
    rest = raw.get(
        f"/v1/{PARENT}/cachedContents",
        params={"pageSize": 5000, "pageToken": page["nextPageToken"]},
        headers=AUTH,
    ).json()

    assert len(page["cachedContents"]) == 1000
    assert len(rest["cachedContents"]) == 1 and "nextPageToken" not in rest


def test_update_ttl_sets_expiry_to_now_plus_ttl_and_expire_time_sets_it_exactly(
    client: genai.Client, emulator: VertexEmulator
) -> None:
    cache = create_cache(client, ttl="600s")
    now = emulator.advance_clock(100)

    by_ttl = client.caches.update(
        name=cache.name, config=types.UpdateCachedContentConfig(ttl="7200s")
    )
    target = T0 + timedelta(hours=5, microseconds=123456)
    by_time = client.caches.update(
        name=cache.name, config=types.UpdateCachedContentConfig(expire_time=target)
    )

    assert by_ttl.expire_time == now + timedelta(seconds=7200)
    assert by_ttl.update_time == now
    assert by_time.expire_time == target
    patches = emulator.requests(method="PATCH")
    assert [patch.body for patch in patches][0] == {"ttl": "7200s"}
    assert all("updateMask" not in patch.query for patch in patches)


def test_delete_removes_the_cache(client: genai.Client) -> None:
    cache = create_cache(client)

    client.caches.delete(name=cache.name)

    with pytest.raises(errors.ClientError) as caught:
        client.caches.get(name=cache.name)
    assert (caught.value.code, caught.value.status) == (404, "NOT_FOUND")


def test_delete_answers_200_with_an_empty_object(client: genai.Client, raw: httpx.Client) -> None:
    cache = create_cache(client)

    response = raw.delete(f"/v1/{cache.name}", headers=AUTH)

    assert response.status_code == 200
    assert response.json() == {}


# -- validation ------------------------------------------------------------------------------


def test_create_below_the_model_minimum_is_rejected_with_vertex_wording(
    client: genai.Client, emulator: VertexEmulator
) -> None:
    with pytest.raises(errors.ClientError) as caught:
        create_cache(client, contents=["too short to cache"])

    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT")
    found = re.fullmatch(
        r"The cached content is of (\d+) tokens\. The minimum token count to start caching is "
        r"(\d+)\.",
        caught.value.message,
    )
    assert found is not None
    assert int(found[1]) == estimate_text_tokens("too short to cache")
    assert int(found[2]) == 1024
    assert emulator.stored_caches() == []


def test_ttl_and_expire_time_together_are_rejected_on_create_and_update(
    client: genai.Client, emulator: VertexEmulator
) -> None:
    later = T0 + timedelta(hours=2)
    with pytest.raises(errors.ClientError) as on_create:
        create_cache(client, ttl="60s", expire_time=later)
    cache = create_cache(client, ttl="60s")
    with pytest.raises(errors.ClientError) as on_update:
        client.caches.update(
            name=cache.name, config=types.UpdateCachedContentConfig(ttl="60s", expire_time=later)
        )

    assert (on_create.value.code, on_create.value.status) == (400, "INVALID_ARGUMENT")
    assert (on_update.value.code, on_update.value.status) == (400, "INVALID_ARGUMENT")
    assert [stored.name for stored in emulator.stored_caches()] == [cache.name]
    assert client.caches.get(name=cache.name).expire_time == T0 + timedelta(seconds=60)


def test_update_accepts_an_explicit_mask_and_rejects_other_fields(
    client: genai.Client, raw: httpx.Client
) -> None:
    cache = create_cache(client)
    url = f"/v1/{cache.name}"

    ok = raw.patch(
        url,
        params={"updateMask": "expire_time"},
        json={"expireTime": "2026-12-02T00:00:00Z"},
        headers=AUTH,
    )
    other_mask = raw.patch(
        url, params={"updateMask": "displayName"}, json={"displayName": "x"}, headers=AUTH
    )
    inferred_other = raw.patch(url, json={"displayName": "x"}, headers=AUTH)
    both_in_mask = raw.patch(
        url, params={"updateMask": "ttl,expireTime"}, json={"ttl": "60s"}, headers=AUTH
    )

    assert ok.status_code == 200 and ok.json()["expireTime"] == "2026-12-02T00:00:00Z"
    for rejected in (other_mask, inferred_other, both_in_mask):
        assert rejected.status_code == 400
        assert rejected.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_unknown_model_is_not_found(client: genai.Client) -> None:
    with pytest.raises(errors.ClientError) as caught:
        client.caches.create(
            model="gemini-9-ultra", config=types.CreateCachedContentConfig(contents=[LONG_TEXT])
        )

    assert (caught.value.code, caught.value.status) == (404, "NOT_FOUND")
    assert caught.value.message == (
        f"Publisher Model `{PARENT}/publishers/google/models/gemini-9-ultra` not found."
    )


def test_encryption_spec_is_accepted_in_both_spellings(
    client: genai.Client, emulator: VertexEmulator, raw: httpx.Client
) -> None:
    key = f"{PARENT}/keyRings/ring/cryptoKeys/key"
    via_sdk = create_cache(client, kms_key_name=key)
    via_rest = raw.post(
        f"/v1/{PARENT}/cachedContents",
        json={
            "model": f"{PARENT}/publishers/google/models/{MODEL}",
            "contents": [{"role": "user", "parts": [{"text": LONG_TEXT}]}],
            "encryptionSpec": {"kmsKeyName": key},
        },
        headers=AUTH,
    )

    assert "encryption_spec" in emulator.create_requests()[0].body
    assert via_rest.status_code == 200 and "encryptionSpec" not in via_rest.json()
    assert [stored.kms_key_name for stored in emulator.stored_caches()] == [key, key]
    assert emulator.stored_cache(via_sdk.name) is not None


def test_inline_content_over_the_limit_is_rejected(
    client: genai.Client, emulator: VertexEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(emulator.caches, "max_inline_bytes", 8000)

    with pytest.raises(errors.ClientError) as caught:
        create_cache(client, contents=[LONG_TEXT * 2])

    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT")
    assert emulator.stored_caches() == []


# -- generateContent ---------------------------------------------------------------------------


def test_generate_content_with_a_cache_reports_cached_tokens_inside_prompt_tokens(
    client: genai.Client,
) -> None:
    cache = create_cache(client, system_instruction="Answer from the handbook.")

    response = client.models.generate_content(
        model=MODEL,
        contents="What is the refund policy?",
        config=types.GenerateContentConfig(cached_content=cache.name),
    )

    usage = response.usage_metadata
    cached = cache.usage_metadata.total_token_count
    assert usage.cached_content_token_count == cached
    assert usage.prompt_token_count == cached + estimate_text_tokens("What is the refund policy?")
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    assert usage.cache_tokens_details[0].token_count == cached
    assert usage.prompt_tokens_details[0].token_count == usage.prompt_token_count
    assert usage.traffic_type == types.TrafficType.ON_DEMAND
    assert "What is the refund policy?" in response.text


def test_generate_content_without_a_cache_has_no_cached_tokens(client: genai.Client) -> None:
    response = client.models.generate_content(model=MODEL, contents="hello")

    assert not response.usage_metadata.cached_content_token_count
    assert response.usage_metadata.prompt_token_count == estimate_text_tokens("hello")


def test_generate_content_with_a_cache_and_a_system_instruction_is_rejected(
    client: genai.Client,
) -> None:
    cache = create_cache(client)

    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(
            model=MODEL,
            contents="hi",
            config=types.GenerateContentConfig(
                cached_content=cache.name, system_instruction="be terse"
            ),
        )

    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT")
    assert caught.value.message == CACHE_WITH_GENERATION_FIELDS_MESSAGE


def test_generate_content_with_a_cache_of_another_model_is_rejected(
    client: genai.Client,
) -> None:
    cache = create_cache(client)

    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(
            model="gemini-2.5-pro",
            contents="hi",
            config=types.GenerateContentConfig(cached_content=cache.name),
        )

    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT")


# -- expiry ------------------------------------------------------------------------------------


def test_an_expired_cache_is_gone_for_every_method(
    client: genai.Client, emulator: VertexEmulator
) -> None:
    cache = create_cache(client, ttl="60s")
    emulator.advance_clock(timedelta(seconds=61))

    calls = [
        lambda: client.caches.get(name=cache.name),
        lambda: client.caches.update(
            name=cache.name, config=types.UpdateCachedContentConfig(ttl="600s")
        ),
        lambda: client.caches.delete(name=cache.name),
        lambda: client.models.generate_content(
            model=MODEL,
            contents="hi",
            config=types.GenerateContentConfig(cached_content=cache.name),
        ),
    ]
    for call in calls:
        with pytest.raises(errors.ClientError) as caught:
            call()
        assert (caught.value.code, caught.value.status) == (404, "NOT_FOUND")
    assert list(client.caches.list()) == []


# -- faults, auth, request log -------------------------------------------------------------------


def test_two_rate_limited_creates_are_retried_then_succeed(
    make_client: Callable[..., genai.Client], emulator: VertexEmulator
) -> None:
    emulator.inject_fault(429, count=2, methods=["POST"], path_contains="cachedContents")
    retrying = make_client(
        retry_options=types.HttpRetryOptions(attempts=3, initial_delay=0.01, max_delay=0.02),
    )

    cache = create_cache(retrying)

    assert [call.status for call in emulator.create_requests()] == [429, 429, 200]
    assert [stored.name for stored in emulator.stored_caches()] == [cache.name]


def test_rate_limit_without_retries_raises_resource_exhausted(
    client: genai.Client, emulator: VertexEmulator
) -> None:
    emulator.inject_fault(429, wrap_in_array=True)

    with pytest.raises(errors.ClientError) as caught:
        create_cache(client)

    assert (caught.value.code, caught.value.status) == (429, "RESOURCE_EXHAUSTED")
    assert caught.value.message == RESOURCE_EXHAUSTED_MESSAGE


def test_unavailable_raises_server_error(client: genai.Client, emulator: VertexEmulator) -> None:
    emulator.inject_fault(503, methods=["GET"])

    with pytest.raises(errors.ServerError) as caught:
        client.caches.get(name=f"{PARENT}/cachedContents/1")

    assert (caught.value.code, caught.value.status) == (503, "UNAVAILABLE")


def test_a_request_without_a_bearer_token_is_unauthenticated(raw: httpx.Client) -> None:
    missing = raw.get(f"/v1/{PARENT}/cachedContents")
    empty = raw.get(f"/v1/{PARENT}/cachedContents", headers={"Authorization": "Bearer"})
    basic = raw.get(f"/v1/{PARENT}/cachedContents", headers={"Authorization": "Basic dGVzdA=="})

    for response in (missing, empty, basic):
        assert response.status_code == 401
        assert response.json()["error"]["status"] == "UNAUTHENTICATED"


def test_a_token_outside_the_project_allow_list_is_denied(
    make_client: Callable[..., genai.Client], emulator: VertexEmulator
) -> None:
    emulator.allow_tokens(PROJECT, ["tenant-a-token"])
    tenant_a = make_client(token="tenant-a-token")
    tenant_b = make_client(token="tenant-b-token")

    with pytest.raises(errors.ClientError) as caught:
        create_cache(tenant_b)
    create_cache(tenant_a)

    assert (caught.value.code, caught.value.status) == (403, "PERMISSION_DENIED")
    assert caught.value.message == (
        "Permission 'aiplatform.cachedContents.create' denied on resource "
        f"'//aiplatform.googleapis.com/{PARENT}' (or it may not exist)."
    )
    fingerprints = [call.token_fingerprint for call in emulator.create_requests()]
    assert fingerprints == [
        token_fingerprint("tenant-b-token"),
        token_fingerprint("tenant-a-token"),
    ]


def test_the_request_log_keeps_bodies_and_drops_the_authorization_header(
    client: genai.Client, emulator: VertexEmulator
) -> None:
    create_cache(client, display_name="logged")

    (call,) = emulator.create_requests(succeeded_only=True)

    assert call.body["displayName"] == "logged"
    assert "authorization" not in call.headers
    assert call.headers["x-goog-api-client"].startswith("google-genai-sdk/")


def test_control_endpoints_inject_faults_move_the_clock_and_reset(
    client: genai.Client, emulator: VertexEmulator, raw: httpx.Client
) -> None:
    cache = create_cache(client, ttl="60s")
    fault = raw.post(
        "/_emulator/faults",
        json={"status": 500, "count": 1, "methods": ["GET"], "path_contains": "cachedContents"},
    )
    with pytest.raises(errors.ServerError) as caught:
        client.caches.get(name=cache.name)
    raw.post("/_emulator/clock", json={"advance_seconds": 120})
    state = raw.get("/_emulator/state").json()
    reset = raw.post("/_emulator/reset")

    assert fault.status_code == 200 and fault.json()["count"] == 1
    assert (caught.value.code, caught.value.status) == (500, "INTERNAL")
    assert [entry["live"] for entry in state["caches"]] == [False]
    assert reset.status_code == 200 and emulator.stored_caches(include_expired=True) == []
    assert emulator.now() == T0


# -- async, persistence, CLI, estimator ------------------------------------------------------


@pytest.mark.asyncio
async def test_the_async_client_round_trips(client: genai.Client) -> None:
    cache = await client.aio.caches.create(
        model=MODEL, config=types.CreateCachedContentConfig(contents=[LONG_TEXT], ttl="300s")
    )
    got = await client.aio.caches.get(name=cache.name)
    listed = [item.name async for item in await client.aio.caches.list()]
    await client.aio.caches.delete(name=cache.name)

    assert got.expire_time == T0 + timedelta(seconds=300)
    assert listed == [cache.name]
    with pytest.raises(errors.ClientError):
        await client.aio.caches.get(name=cache.name)
    await client.aio.aclose()


def test_a_state_file_keeps_caches_across_restarts(tmp_path) -> None:
    state_file = tmp_path / "vertex.json"
    with running_vertex_emulator(state_file=state_file) as (base_url, _):
        with genai_client_for(base_url) as first_client:
            name = create_cache(first_client, display_name="demo").name
    with running_vertex_emulator(state_file=state_file) as (base_url, restarted):
        with genai_client_for(base_url) as second_client:
            again = second_client.caches.get(name=name)

    assert again.display_name == "demo"
    assert restarted.stored_cache(name).contents[0]["parts"][0]["text"] == LONG_TEXT


def test_the_cli_serves_until_terminated() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "caches.providers.vertex_emulator", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/_emulator/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the CLI emulator did not come up"
                time.sleep(0.05)  # waiting for the child process to bind its port
        assert health.json() == {"ok": True}
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_token_estimator_is_deterministic_and_accepts_sdk_objects() -> None:
    tools_a = [{"functionDeclarations": [{"name": "f", "description": "d"}]}]
    tools_b = [{"functionDeclarations": [{"description": "d", "name": "f"}]}]
    sdk_content = types.Content(role="user", parts=[types.Part(text="é" * 10)])

    assert estimate_text_tokens("abcd") == 1
    assert estimate_text_tokens("abcde") == 2
    assert estimate_cached_content_tokens(tools=tools_a) == estimate_cached_content_tokens(
        tools=tools_b
    )
    assert estimate_cached_content_tokens(contents=[sdk_content]) == 5  # 20 UTF-8 bytes
    assert estimate_cached_content_tokens(
        system_instruction="ab", contents=["ab"]
    ) == estimate_text_tokens("abab")
