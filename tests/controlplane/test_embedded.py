"""Embedded services: whoever starts them owns them, attachers never stop them, and
``cacheplane up`` stops loudly when one dies. Real processes throughout."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psycopg
import pytest
import redis

from controlplane.embedded import EmbeddedServices, free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@pytest.fixture
def tmp_path() -> Path:
    """A data dir the embedded PostgreSQL's system user can enter (pytest's own tmp dir is
    private to the user running the tests, and PostgreSQL refuses to run as root)."""
    import shutil
    import tempfile

    base = REPO / ".cacheplane" / "test-runs"
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_service_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's own servers are in the environment; these tests start their own."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)


def _env(data_dir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "PYTEST")) and k not in {"DATABASE_URL", "REDIS_URL"}
    }
    env["CACHEPLANE_DATA_DIR"] = str(data_dir)
    env["CACHEPLANE_NO_DEMO_WORKER"] = "1"
    env["CACHEPLANE_LOG_LEVEL"] = "WARNING"
    return env


def _cacheplane(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_an_attached_command_uses_the_owners_servers_and_leaves_them_running(
    tmp_path: Path,
) -> None:
    owner = EmbeddedServices(tmp_path, roles=True)
    exported = owner.start()
    try:
        postgres_pid, redis_pid = owner.postgres.pid, owner.redis.pid
        probe = (
            "import os, redis; from django.db import connection; "
            "connection.ensure_connection(); "
            "print('db-user', connection.settings_dict['USER']); "
            "redis.Redis.from_url(os.environ['REDIS_URL']).set('attached', '1')"
        )
        result = _cacheplane(["manage", "shell", "-c", probe], _env(tmp_path))
        assert result.returncode == 0, result.stderr
        assert "db-user cacheplane_app" in result.stdout
        # Same servers, still running: nothing was stopped, no second redis-server.
        assert owner.postgres.alive() and owner.postgres.pid == postgres_pid
        assert owner.redis.alive() and owner.redis.pid == redis_pid
        assert redis.Redis.from_url(exported["REDIS_URL"]).get("attached") == b"1"
        with psycopg.connect(
            host=owner.postgres.socket_dir, user="cacheplane_owner", dbname="cacheplane"
        ) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("cacheplane_owner",)
        import psutil

        servers = [
            p
            for p in psutil.process_iter(["name"])
            if "redis" in (p.info["name"] or "") and _cwd(p) == tmp_path / "redis"
        ]
        assert [p.pid for p in servers] == [redis_pid]
    finally:
        owner.stop()
    assert not owner.postgres.alive() and not owner.redis.alive()


def _cwd(process) -> Path | None:
    try:
        return Path(process.cwd())
    except Exception:
        return None


def test_the_next_owner_adopts_servers_left_by_a_killed_owner(tmp_path: Path) -> None:
    script = (
        "import sys, time; from pathlib import Path; "
        "from controlplane.embedded import EmbeddedServices; "
        "s = EmbeddedServices(Path(sys.argv[1])); s.start(); "
        "print(s.postgres.pid, s.redis.pid, flush=True); time.sleep(600)"
    )
    first = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=REPO,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        postgres_pid, redis_pid = map(int, first.stdout.readline().split())
    finally:
        first.kill()  # SIGKILL: no cleanup; the flock goes with the process
        first.wait()
    second = EmbeddedServices(tmp_path)
    second.start()
    try:
        assert second.postgres.owned and second.redis.owned
        assert second.postgres.pid == postgres_pid  # adopted, not a second postmaster
        assert second.redis.pid != redis_pid and second.redis.alive()
        import psutil

        assert not psutil.pid_exists(redis_pid) or psutil.Process(redis_pid).status() == "zombie"
    finally:
        second.stop()


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)


def test_up_survives_attached_commands_and_stops_naming_a_dead_service(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env["CACHEPLANE_ADMIN_PASSWORD"] = "correct-horse-battery"
    port = free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "up", "--no-demo", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(up.stdout, out), daemon=True).start()
    try:
        deadline = time.monotonic() + 240
        seen = ""
        while "Press Ctrl-C" not in seen:
            assert up.poll() is None, up.stderr.read()
            assert time.monotonic() < deadline, seen
            try:
                seen += out.get(timeout=1)
            except queue.Empty:
                pass
        for command in (["audit", "verify-chain"], ["isolation-check", "--help"]):
            result = _cacheplane(command, env)
            assert result.returncode == 0, result.stderr + result.stdout
            assert up.poll() is None
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
        # The embedded default is least privilege: up's app role cannot touch audit rows.
        with psycopg.connect(
            host=str(tmp_path / "postgres"), user="cacheplane_app", dbname="cacheplane"
        ) as conn:
            assert conn.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0] > 0
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("DELETE FROM audit_auditevent")

        redis_pid = int((tmp_path / "redis" / "redis.pid").read_text())
        os.kill(redis_pid, signal.SIGKILL)
        assert up.wait(timeout=60) == 1
        assert "embedded Redis exited unexpectedly; stopping." in up.stderr.read()
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGTERM)
            up.wait(timeout=60)
    # up stopped its own PostgreSQL on the way out.
    assert not (tmp_path / "postgres" / "postmaster.pid").exists()
