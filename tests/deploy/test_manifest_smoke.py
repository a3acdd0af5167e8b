"""The production overlay's processes, run as the kubelet would run them.

Each container's command, env (ConfigMap, Secrets by reference, fieldRefs, the image's
ENV from the Containerfile) and probes come from ``kubectl kustomize
deploy/overlays/production``; the processes run from this checkout's installed package
against the suite's PostgreSQL and Redis. The only changes are those a pod's own
network namespace makes unnecessary: each server listens on a free loopback port
instead of 0.0.0.0:8000, and a worker advertises a loopback address.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from django.conf import settings
from psycopg import sql

from controlplane.embedded import free_port
from tests.deploy.support import (
    containerfile_runtime_env,
    expand,
    pod_env,
    pod_spec,
    render,
    resource,
)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SUFFIX = f"{os.getpid()}"
OWNER, APP = f"smoke_owner_{SUFFIX}", f"smoke_app_{SUFFIX}"
DATABASE = f"smoke_deploy_{SUFFIX}"


def _until(predicate: Callable[[], Any], *, timeout: float, what: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what()}")


def _superuser_params() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    params = {"host": db["HOST"], "user": db["USER"], "dbname": "postgres", "autocommit": True}
    if db.get("PORT"):
        params["port"] = db["PORT"]
    if db.get("PASSWORD"):
        params["password"] = db["PASSWORD"]
    return params


@pytest.fixture
def roles() -> Iterator[dict[str, str]]:
    """The database an operator prepares (docs/deploy.md): an owner, an application role
    that owns nothing, the database and its schema owned by the owner."""
    params = _superuser_params()
    password = secrets.token_urlsafe(16)
    with psycopg.connect(**params) as conn:
        for role in (OWNER, APP):
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(DATABASE), sql.Identifier(OWNER)
            )
        )
    with psycopg.connect(**{**params, "dbname": DATABASE}) as conn:
        conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(OWNER)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(APP)))
    db = settings.DATABASES["default"]
    where = db["HOST"].replace("/", "%2F") + (f":{db['PORT']}" if db.get("PORT") else "")
    yield {
        "app": f"postgresql://{APP}:{password}@{where}/{DATABASE}",
        "owner": f"postgresql://{OWNER}:{password}@{where}/{DATABASE}",
    }
    with psycopg.connect(**params) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE))
        )
        for role in (APP, OWNER):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


class Pods:
    """Runs containers of the rendered overlay as local processes."""

    def __init__(self, docs: tuple[dict[str, Any], ...], secrets_: dict, workdir: Path) -> None:
        self.docs = docs
        self.secrets = secrets_
        self.workdir = workdir
        self.config = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
        image = containerfile_runtime_env()
        venv_bin = str(Path(sys.executable).parent)
        assert image["PATH"].startswith("/opt/venv/bin:")
        self.base = {
            **image,
            # The image puts its venv first on the base image's PATH; here: this venv.
            "PATH": f"{venv_bin}:{os.environ['PATH']}",
            "HOME": str(workdir),
        }
        self.running: list[tuple[str, subprocess.Popen[bytes]]] = []

    def container(self, kind: str, name: str) -> dict[str, Any]:
        (container,) = pod_spec(resource(self.docs, kind, name))["containers"]
        return container

    def environment(self, container: dict[str, Any], pod: str) -> tuple[dict, dict]:
        env, static = pod_env(
            container,
            pod_name=pod,
            config_maps=self.config,
            secrets=self.secrets,
            base=self.base,
        )
        # The image's /tmp is an emptyDir per pod; here, one directory per pod.
        env["CACHEPLANE_DATA_DIR"] = str(self.workdir / pod / "data")
        return env, static

    def command(
        self, container: dict[str, Any], env: dict[str, str], port: int | None
    ) -> list[str]:
        argv = [expand(arg, env) for arg in container["command"] + container.get("args", [])]
        if port is not None:
            argv[argv.index("--port") + 1] = str(port)
            argv[argv.index("--host") + 1] = "127.0.0.1"
        return argv

    def start(self, kind: str, name: str, *, port: int | None = None) -> dict[str, Any]:
        container = self.container(kind, name)
        env, static = self.environment(container, f"{name}-0")
        log = (self.workdir / f"{name}.log").open("wb")
        process = subprocess.Popen(
            self.command(container, env, port),
            cwd=self.workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.running.append((name, process))
        return {"container": container, "env": env, "static": static, "port": port}

    def run(
        self,
        kind: str,
        name: str,
        extra: tuple[str, ...] | list[str] = (),
        *,
        flags: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a container's command to its end; ``flags`` replaces those flags' values."""
        container = self.container(kind, name)
        env, _ = self.environment(container, f"{name}-0")
        argv = self.command(container, env, None)
        for flag, value in (flags or {}).items():
            argv[argv.index(flag) + 1] = value
        return subprocess.run(
            argv + list(extra),
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )

    def http_probe(self, pod: dict[str, Any], probe: str) -> int:
        spec = pod["container"][probe]["httpGet"]
        assert spec["port"] == "http"
        try:
            # The kubelet sends Host: <pod IP>:<port>, which ALLOWED_HOSTS does not list.
            return httpx.get(f"http://127.0.0.1:{pod['port']}{spec['path']}", timeout=5).status_code
        except httpx.HTTPError:
            return 0

    def exec_probe(self, pod: dict[str, Any], probe: str) -> subprocess.CompletedProcess[str]:
        spec = pod["container"][probe]
        argv = [expand(arg, pod["static"]) for arg in spec["exec"]["command"]]
        return subprocess.run(
            argv,
            cwd=self.workdir,
            env=pod["env"],
            capture_output=True,
            text=True,
            timeout=spec.get("timeoutSeconds", 1) + 30,
        )

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for _, process in self.running:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _, process in self.running:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def pods(tmp_path: Path, roles: dict[str, str], redis_flush) -> Iterator[Pods]:
    secrets_ = {
        "cacheplane-secrets": {
            "CACHEPLANE_SECRET_KEY": secrets.token_urlsafe(64),
            "DATABASE_URL": roles["app"],
            "REDIS_URL": settings.REDIS_URL,
            "CACHEPLANE_VLLM_API_KEY": secrets.token_urlsafe(24),
            "CACHEPLANE_METRICS_TOKEN": secrets.token_urlsafe(32),
        },
        "cacheplane-migrate": {"DATABASE_MIGRATE_URL": roles["owner"]},
    }
    running = Pods(render("production"), secrets_, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _privileges(table: str) -> dict[str, bool]:
    with psycopg.connect(**{**_superuser_params(), "dbname": DATABASE}) as conn:
        owner = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE schemaname = 'public' AND tablename = %s",
            (table,),
        ).fetchone()[0]
        rights = {
            right: conn.execute(
                "SELECT has_table_privilege(%s, %s, %s)", (APP, table, right)
            ).fetchone()[0]
            for right in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
        }
    return {"owned_by_owner": owner == OWNER, **rights}


def test_the_production_overlays_processes_run_and_pass_their_probes(pods: Pods) -> None:
    # The migrate Job: as the owner, then the application role's grants.
    job = pods.run("Job", "cacheplane-migrate")
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-2000:]
    assert f"granted application role {APP}" in job.stdout
    assert _privileges("audit_auditevent") == {
        "owned_by_owner": True,
        "SELECT": True,
        "INSERT": True,
        "UPDATE": False,
        "DELETE": False,
        "TRUNCATE": False,
    }
    assert _privileges("tenants_tenant")["UPDATE"] is True

    web = pods.start("Deployment", "cacheplane-web", port=free_port())
    gateway = pods.start("Deployment", "cacheplane-gateway", port=free_port())
    celery = pods.start("Deployment", "cacheplane-celery")
    indexer = pods.start("Deployment", "cacheplane-kv-indexer")

    # A worker registers as the GPU StatefulSet's command does (here with loopback
    # addresses and no vLLM to exec), then publishes one stored block.
    from workers.engine.kv_events import BlockStored, KVEventsConfig, ZmqEventPublisher

    pub_port, replay_port = free_port(), free_port()
    publisher = ZmqEventPublisher(
        KVEventsConfig(
            enable_kv_cache_events=True,
            # A wildcard, as the manifests' workers: vLLM's publisher connects (instead of
            # binding) to any other address.
            endpoint=f"tcp://*:{pub_port}",
            replay_endpoint=f"tcp://127.0.0.1:{replay_port}",
        )
    )
    local = {
        "--advertise-url": f"http://127.0.0.1:{free_port()}",
        "--kv-events-endpoint": f"tcp://*:{pub_port},tcp://*:{replay_port}",
    }
    planned = pods.run("StatefulSet", "cacheplane-worker", ["--dry-run"], flags=local)
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "would register worker cacheplane-worker-0" in planned.stdout  # and writes nothing
    assert "--kv-events-config" in planned.stdout  # the vLLM command it would exec
    # For real: it registers, then execs its vLLM interpreter (here /bin/true: no vLLM).
    registered = pods.run(
        "StatefulSet", "cacheplane-worker", ["--vllm-python", "/bin/true"], flags=local
    )
    assert registered.returncode == 0, registered.stderr[-2000:]
    assert "registered worker cacheplane-worker-0" in registered.stdout

    try:
        import redis

        from workers import kv_index

        client = redis.Redis.from_url(settings.REDIS_URL)
        block = 0x5EED_0001

        def indexed() -> bool:
            publisher.publish(
                [
                    BlockStored(
                        block_hashes=[block],
                        parent_block_hash=None,
                        token_ids=list(range(16)),
                        block_size=16,
                        lora_id=None,
                        medium="GPU",
                        lora_name=None,
                    )
                ]
            )
            return client.hexists(kv_index.worker_key("cacheplane-worker-0"), str(block))

        _until(
            indexed,
            timeout=60,
            what=lambda: "the indexer to index the block\n" + pods.log("cacheplane-kv-indexer"),
        )
        # The indexer marks its synced streams live every LIVE_EVERY seconds, not per event.
        _until(
            lambda: client.hexists(kv_index.LIVE_KEY, "cacheplane-worker-0"),
            timeout=30,
            what=lambda: (
                "the indexer to mark the worker live\n" + pods.log("cacheplane-kv-indexer")
            ),
        )
        probe = pods.exec_probe(indexer, "livenessProbe")
        assert probe.returncode == 0, probe.stderr
    finally:
        publisher.shutdown()

    for pod, name in ((web, "cacheplane-web"), (gateway, "cacheplane-gateway")):
        _until(
            lambda pod=pod: pods.http_probe(pod, "startupProbe") == 200,
            timeout=90,
            what=lambda name=name: name + "\n" + pods.log(name),
        )
        assert pods.http_probe(pod, "readinessProbe") == 200, pods.log(name)
        assert pods.http_probe(pod, "livenessProbe") == 200
    # Production serves /metrics to the scrape token only, whatever the Host.
    token = pods.secrets["cacheplane-secrets"]["CACHEPLANE_METRICS_TOKEN"]
    scrape = httpx.get(
        f"http://127.0.0.1:{web['port']}/metrics",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert scrape.status_code == 200 and b"django_http_requests" in scrape.content
    assert httpx.get(f"http://127.0.0.1:{web['port']}/metrics", timeout=10).status_code == 401

    def celery_alive() -> bool:
        return pods.exec_probe(celery, "livenessProbe").returncode == 0

    _until(
        celery_alive,
        timeout=90,
        what=lambda: "the Celery liveness probe\n" + pods.log("cacheplane-celery"),
    )
    for name, process in pods.running:
        assert process.poll() is None, f"{name} exited\n{pods.log(name)}"
