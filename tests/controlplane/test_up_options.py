"""`cacheplane up`'s ports and data dir: every one listed in --help, set by flag or variable.

The whole start-up with the flags is `tests/controlplane/test_startup.py`
(`test_up_with_no_urls_runs_on_embedded_postgres_and_redis`, an end-to-end test).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from controlplane.embedded import EmbeddedServices, free_port
from controlplane.env import ConfigError
from controlplane.up import parse_args
from controlplane.up_processes import demo_providers

REPO = Path(__file__).resolve().parents[2]
PORT_VARIABLES = {
    "--port": "CACHEPLANE_HTTP_PORT",
    "--redis-port": "CACHEPLANE_EMBEDDED_REDIS_PORT",
    "--vertex-emulator-port": "CACHEPLANE_VERTEX_EMULATOR_PORT",
    "--worker-port": "CACHEPLANE_DEMO_WORKER_PORT",
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (
        *PORT_VARIABLES.values(),
        "CACHEPLANE_HTTP_HOST",
        "CACHEPLANE_VERTEX_PROJECT",
        "CACHEPLANE_VERTEX_BASE_URL",
        "CACHEPLANE_VERTEX_STATIC_TOKEN",
        "CACHEPLANE_VERTEX_LOCATION",
        "CACHEPLANE_NO_DEMO_WORKER",
        "CACHEPLANE_DEMO_WORKER_URL",
    ):
        # setenv first: undo then removes what `up` exported (demo_providers writes
        # os.environ directly), whether or not the variable was set before.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def test_up_help_lists_every_port_and_the_data_dir_with_its_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "up", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for flag, variable in {**PORT_VARIABLES, "--data-dir": "CACHEPLANE_DATA_DIR"}.items():
        assert flag in result.stdout
        assert variable in result.stdout
    assert "Unix socket" in result.stdout  # PostgreSQL: no TCP port to place


def test_ports_come_from_the_environment_and_a_flag_wins(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("CACHEPLANE_HTTP_PORT", "18001")
    clean_env.setenv("CACHEPLANE_EMBEDDED_REDIS_PORT", "18002")
    clean_env.setenv("CACHEPLANE_VERTEX_EMULATOR_PORT", "18003")
    clean_env.setenv("CACHEPLANE_DEMO_WORKER_PORT", "18004")
    from_env = parse_args([], data_dir=tmp_path)
    assert (
        from_env.port,
        from_env.redis_port,
        from_env.vertex_emulator_port,
        from_env.worker_port,
    ) == (18001, 18002, 18003, 18004)
    assert from_env.data_dir == tmp_path

    flags = parse_args(
        [
            "--port=19001",
            "--redis-port=19002",
            "--vertex-emulator-port=19003",
            "--worker-port=19004",
            f"--data-dir={tmp_path / 'elsewhere'}",
        ],
        data_dir=tmp_path,
    )
    assert (flags.port, flags.redis_port, flags.vertex_emulator_port, flags.worker_port) == (
        19001,
        19002,
        19003,
        19004,
    )
    assert flags.data_dir == tmp_path / "elsewhere"


def test_unset_ports_mean_any_free_port_except_the_console(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    args = parse_args([], data_dir=tmp_path)
    assert (args.port, args.redis_port, args.vertex_emulator_port, args.worker_port) == (
        8000,
        0,
        0,
        0,
    )


@pytest.mark.parametrize("bad", ["redis", "-1"])
def test_a_bad_port_variable_is_a_configuration_error_naming_it(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, bad: str
) -> None:
    clean_env.setenv("CACHEPLANE_EMBEDDED_REDIS_PORT", bad)
    with pytest.raises(ConfigError, match="CACHEPLANE_EMBEDDED_REDIS_PORT"):
        parse_args([], data_dir=tmp_path)


@pytest.mark.parametrize(
    "argv", [["--worker-port", "70000"], ["--redis-port", "x"], ["--port", "0"]]
)
def test_a_bad_port_flag_stops_with_a_usage_error(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv, data_dir=tmp_path)
    assert exited.value.code == 2


def test_the_emulator_and_the_reference_worker_start_on_the_given_ports(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    vertex_port, worker_port = free_port(), free_port()
    children = demo_providers(
        sys.executable, tmp_path, tmp_path, vertex_port=vertex_port, worker_port=worker_port
    )
    by_name = {child.name: child.argv for child in children}
    assert by_name["vertex-emulator"][by_name["vertex-emulator"].index("--port") + 1] == str(
        vertex_port
    )
    assert by_name["reference-worker"][by_name["reference-worker"].index("--port") + 1] == str(
        worker_port
    )
    # The rest of `up` (the server's settings, the demo, the banner) reads these.
    assert os.environ["CACHEPLANE_VERTEX_BASE_URL"] == f"http://127.0.0.1:{vertex_port}"
    assert os.environ["CACHEPLANE_DEMO_WORKER_URL"] == f"http://127.0.0.1:{worker_port}"


def test_the_embedded_redis_listens_on_the_given_port(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("DATABASE_URL", "postgresql://unused@127.0.0.1/unused")  # Redis only
    clean_env.setenv("REDIS_URL", "")
    port = free_port()
    services = EmbeddedServices(tmp_path / "data", persist_redis=False, redis_port=port)
    exported = services.start()
    try:
        assert exported["REDIS_URL"] == f"redis://127.0.0.1:{port}/0"
        assert redis.Redis(host="127.0.0.1", port=port).ping()
    finally:
        services.stop()
