"""Shared fixtures, and the guard that the suite never rewrites tracked files."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parent.parent


def _tracked_changes() -> tuple[str, list[str]] | None:
    """A digest of every tracked file's difference from HEAD, and those files (None: no git)."""
    try:
        diff = subprocess.run(
            ["git", "diff", "HEAD", "--no-ext-diff", "--binary"],
            cwd=_REPO,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        names = subprocess.run(
            ["git", "diff", "HEAD", "--name-only"],
            cwd=_REPO,
            capture_output=True,
            check=True,
            text=True,
            timeout=60,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return hashlib.sha256(diff).hexdigest(), names


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_TRACKED] = _tracked_changes()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Report tracked files that changed during the run (outputs belong in tmp_path).

    CI (``CACHEPLANE_TRACKED_FILES_GUARD=strict``, set by ``.ci/run``) fails the run; a
    developer's checkout only warns, since its owner may edit or commit while tests run.
    """
    before = session.config.stash.get(_TRACKED, None)
    after = _tracked_changes()
    if before is None or after is None or before[0] == after[0]:
        return
    changed = sorted(set(after[1]) ^ set(before[1])) or after[1]
    strict = os.environ.get("CACHEPLANE_TRACKED_FILES_GUARD") == "strict"
    writer = session.config.get_terminal_writer()
    writer.line()
    writer.line(
        f"{'FAILED' if strict else 'WARNING'}: tracked files changed during the test run: "
        f"{', '.join(changed)}",
        red=True,
    )
    if strict:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_TRACKED = pytest.StashKey[tuple[str, list[str]] | None]()


@pytest.hookimpl(tryfirst=True)  # before the -m deselection reads the markers
def pytest_collection_modifyitems(config, items) -> None:
    """Mark every test that drives Chromium (its ``browser`` fixture, directly or through
    ``console``) ``browser``: plain ``pytest`` leaves them out, CI runs them in their own
    step (.ci/steps/52-browser.sh), where they fail without Chromium."""
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)


def pytest_configure(config) -> None:
    """Hash test users' passwords cheaply (see tests/hashers.py); production keeps Django's."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = [
        "tests.hashers.FewIterationsPBKDF2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


@pytest.fixture(autouse=True)
def _channel_layer_per_test():
    """Each test gets its own channel-layer instance. channels keeps one instance per
    process, and channels-redis refuses a receive from a second event loop while another
    loop still receives on it ("Two event loops are trying to receive() on one channel
    layer at once!"): the session's live server (its own thread and loop) keeps consumers
    of browser pages, and a WebSocket test runs its communicator on the test's loop.
    Messages still cross between instances: they go through Redis."""
    from channels.layers import channel_layers

    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


@pytest.fixture(scope="session", autouse=True)
def _redis_fresh_for_the_run():
    """The run's Redis database starts empty, as its test database does: keys a previous
    run left (a killed run leaves budget holds) would otherwise be read as this run's,
    since a fresh test database numbers its budget periods from 1 again."""
    from controlplane import ops

    ops.redis_client().flushdb()


@pytest.fixture
def redis_flush():
    """A clean Redis database for tests that assert on keys."""
    from controlplane import ops

    client = ops.redis_client()
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Drop stray connections (worker threads, async executors) before the test DB goes."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(autouse=True)
def _fresh_key_cache():
    """API-key authentications are cached per process; tests must not share them."""
    from tenants.services.keys import key_cache

    key_cache.clear()
    yield
    key_cache.clear()


@pytest.fixture(autouse=True)
def _fresh_api_key_throttle():
    """Failed API keys are counted per source IP in Redis; tests must not share counts."""
    from tenants.services.throttling import api_key_throttle_reset

    api_key_throttle_reset(all_sources=True)
    yield
    api_key_throttle_reset(all_sources=True)


@pytest.fixture
def tenant_a(db):
    from tests.factories import TenantFactory

    return TenantFactory(slug="tenant-a")


@pytest.fixture
def tenant_b(db):
    from tests.factories import TenantFactory

    return TenantFactory(slug="tenant-b")


@pytest.fixture
def admin_a(tenant_a):
    from tests.factories import HumanFactory, bind

    user = HumanFactory(username="alice")
    bind(user, "tenant.admin", tenant_a)
    return user


@pytest.fixture
def admin_b(tenant_b):
    from tests.factories import HumanFactory, bind

    user = HumanFactory(username="bob")
    bind(user, "tenant.admin", tenant_b)
    return user


@pytest.fixture
def platform_admin(db):
    from tests.factories import HumanFactory, bind

    user = HumanFactory(username="root", is_staff=True, is_superuser=True)
    bind(user, "platform.admin", None)
    return user


@pytest.fixture
def api():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def vertex(settings):
    """A running Vertex emulator that the control plane's Vertex provider talks to."""
    from caches.providers.vertex import forget_clients
    from caches.providers.vertex_emulator.launcher import running_vertex_emulator

    with running_vertex_emulator() as (base_url, emulator):
        settings.CACHEPLANE_VERTEX_BASE_URL = base_url
        settings.CACHEPLANE_VERTEX_STATIC_TOKEN = "test-token"
        settings.CACHEPLANE_VERTEX_PROJECT = "p1"
        settings.CACHEPLANE_VERTEX_LOCATION = "us-central1"
        settings.CACHEPLANE_PROVIDER_TIMEOUT_SECONDS = 10
        forget_clients()
        emulator.base_url = base_url
        yield emulator
        forget_clients()


@pytest.fixture(scope="session")
def live_server_url():
    """controlplane.asgi.application under uvicorn in a thread (the real HTTP stack)."""
    import socket
    import threading
    import time

    import uvicorn

    from controlplane.assets import ensure_assets

    # Before the app is built: whitenoise indexes static files (node_modules) when the
    # ASGI application is created, i.e. when controlplane.asgi is imported.
    ensure_assets()
    from controlplane.asgi import application
    from controlplane.up_processes import forwarded_allow_ips

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            application,
            log_level="warning",
            lifespan="on",
            access_log=False,
            # As `cacheplane up` runs it: X-Forwarded-For believed from no peer by default.
            forwarded_allow_ips=forwarded_allow_ips(),
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "live server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.fixture
def fresh_gateway():
    """Forget the gateway's few-second caches between tests (new tenants, new workers)."""
    from gateway.app import prefix_index
    from gateway.directory import directory
    from gateway.identity import forget_identities

    directory.forget()
    forget_identities()
    prefix_index.clear()
    from gateway import budget, pricing, ratelimit
    from gateway.adapters import registry

    for module in (budget, pricing, ratelimit, registry):
        module.forget()
    yield
    directory.forget()
    forget_identities()


REF_MODEL = "test/ref-tiny"


@pytest.fixture
def ref_workers(transactional_db, fresh_gateway, redis_flush):
    """Two reference workers registered in the control plane."""
    import contextlib

    from tenants.actor import Actor
    from tests.workers.engine.support import tiny_config
    from workers.engine.launcher import serve
    from workers.services import worker_register

    with contextlib.ExitStack() as stack:
        running = []
        for n in range(2):
            worker = stack.enter_context(
                serve(
                    tiny_config(
                        num_blocks=512, max_model_len=1024, enable_prompt_tokens_details=True
                    )
                )
            )
            worker_register(
                actor=Actor.cli(), name=f"gw{n}", base_url=worker.base_url, model=REF_MODEL
            )
            running.append(worker)
        yield running


@pytest.fixture
def tenant_keys(transactional_db):
    """Two tenants, each with a developer service account and its API key."""
    from tenants.services import keys
    from tests.factories import HumanFactory, ServiceAccountFactory, TenantFactory, actor_for, bind

    made = {}
    for slug in ("gw-acme", "gw-globex"):
        tenant = TenantFactory(slug=slug)
        admin = HumanFactory()
        bind(admin, "tenant.admin", tenant)
        sa = ServiceAccountFactory(tenant=tenant)
        bind(sa, "tenant.developer", tenant)
        issued = keys.api_key_create(
            actor=actor_for(admin), tenant=tenant, name="app", principal=sa
        )
        made[slug] = {
            "tenant": tenant,
            "admin": admin,
            "sa": sa,
            "key": issued.plaintext,
            "key_row": issued.key,
        }
    return made
