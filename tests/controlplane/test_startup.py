"""Start-up: the README's first command, and bad configuration stopping it cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from controlplane.embedded import free_port

REPO = Path(__file__).resolve().parents[2]


def _cacheplane(
    args: list[str], env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST"))}
    env["CACHEPLANE_DATA_DIR"] = str(tmp_path / "data")
    env["CACHEPLANE_NO_DEMO_WORKER"] = "1"
    return env


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DATABASE_URL", "not-a-url", "DATABASE_URL: malformed value"),
        ("DATABASE_URL", "mysql://root@localhost/db", "only PostgreSQL"),
        ("REDIS_URL", "http://localhost:6379", "REDIS_URL: expected redis://"),
        ("CACHEPLANE_ENV", "staging", "CACHEPLANE_ENV: must be one of"),
    ],
)
def test_malformed_variable_stops_with_one_line_naming_it(
    tmp_path: Path, variable: str, value: str, expected: str
) -> None:
    env = _base_env(tmp_path)
    env[variable] = value
    result = _cacheplane(["manage", "check"], env, timeout=60)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_production_without_secret_key_stops_with_one_line(tmp_path: Path) -> None:
    env = _base_env(tmp_path)
    env["CACHEPLANE_ENV"] = "production"
    env.pop("CACHEPLANE_SECRET_KEY", None)
    result = _cacheplane(["manage", "check"], env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "cacheplane: configuration error: CACHEPLANE_SECRET_KEY: is required but not set"
    )


def test_unreachable_redis_stops_up_with_one_line_naming_redis_url(
    tmp_path: Path, scratch_database: str
) -> None:
    env = _base_env(tmp_path)
    env["DATABASE_URL"] = scratch_database  # reachable, so Redis is what fails
    env["REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    result = _cacheplane(["up", "--check", "--port", str(free_port())], env, timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cacheplane: configuration error: REDIS_URL: cannot connect")


@pytest.fixture
def scratch_database() -> str:
    """A fresh database on the test server, for a full `cacheplane up` to migrate."""
    db = settings.DATABASES["default"]
    params = {"host": db["HOST"], "user": db["USER"], "dbname": "postgres", "autocommit": True}
    if db.get("PORT"):
        params["port"] = db["PORT"]
    if db.get("PASSWORD"):
        params["password"] = db["PASSWORD"]
    name = f"cacheplane_up_{os.getpid()}"
    with psycopg.connect(**params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    host = db["HOST"].replace("/", "%2F")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    yield f"postgresql://{db['USER']}@{host}{port}/{name}"
    with psycopg.connect(**params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.e2e
def test_up_migrates_bootstraps_and_serves_readyz(tmp_path: Path, scratch_database: str) -> None:
    env = _base_env(tmp_path)
    env["DATABASE_URL"] = scratch_database
    env["REDIS_URL"] = settings.REDIS_URL
    env["CACHEPLANE_ADMIN_PASSWORD"] = "correct-horse-battery"
    result = _cacheplane(["up", "--check", "--port", str(free_port())], env)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "Cacheplane is running." in result.stdout
    assert "Created platform admin 'admin'" in result.stdout
    assert "Created demo tenant 'acme-legal'" in result.stdout
    # Second start: data kept, nothing created twice.
    again = _cacheplane(["up", "--check", "--port", str(free_port())], env)
    assert again.returncode == 0, again.stderr
    assert "Created" not in again.stdout


@pytest.mark.e2e
def test_up_with_no_urls_runs_on_embedded_postgres_and_redis(tmp_path: Path) -> None:
    env = _base_env(tmp_path)
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    env.pop("CACHEPLANE_VERTEX_PROJECT", None)
    env.pop("CACHEPLANE_VERTEX_BASE_URL", None)
    redis_port, emulator_port = free_port(), free_port()
    # The flags win over CACHEPLANE_DATA_DIR (set by _base_env to another folder).
    result = _cacheplane(
        [
            "up",
            "--check",
            "--port",
            str(free_port()),
            "--data-dir",
            str(tmp_path / "flagged"),
            "--redis-port",
            str(redis_port),
            "--vertex-emulator-port",
            str(emulator_port),
        ],
        env,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "embedded PostgreSQL" in result.stdout
    assert f"embedded redis-server at redis://127.0.0.1:{redis_port}/0" in result.stdout
    assert f"emulator at http://127.0.0.1:{emulator_port}" in result.stdout
    assert (tmp_path / "flagged" / "postgres" / "PG_VERSION").exists()
    assert not (tmp_path / "data" / "postgres").exists()


def test_a_command_beside_up_uses_ups_secret_for_the_data_dir(
    tmp_path: Path, scratch_database: str
) -> None:
    """API keys are digested with the secret key: one that `cacheplane demo` creates
    must verify in the server `cacheplane up` runs on the same data dir."""
    from controlplane.up import _persisted_secret

    env = _base_env(tmp_path)
    env.pop("CACHEPLANE_SECRET_KEY", None)
    env["CACHEPLANE_ENV"] = "development"
    env["DATABASE_URL"] = scratch_database
    env["REDIS_URL"] = settings.REDIS_URL
    script = "from django.conf import settings; print('KEY=' + settings.SECRET_KEY)"
    result = _cacheplane(["manage", "shell", "-c", script], env, timeout=120)
    assert result.returncode == 0, result.stderr
    printed = next(line for line in result.stdout.splitlines() if line.startswith("KEY="))
    data_dir = tmp_path / "data"
    assert printed == "KEY=" + _persisted_secret(data_dir)  # the file up reads
