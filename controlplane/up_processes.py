"""The child processes ``cacheplane up`` supervises: what each runs, how it starts and
stops (its own session, so a stop reaches its children too), and the waits until they serve.

The demo's local provider stand-ins (a Vertex AI emulator, one reference worker) are
started only when no real provider is configured.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controlplane.embedded import free_port

DEMO_WORKER_MODEL = "cacheplane/ref-tiny"


@dataclass
class Child:
    """One supervised process and the log file it writes to."""

    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str]) -> None:
        log = self.log_path.open("ab")
        # Each child's database connections carry its name in pg_stat_activity.
        env = {"CACHEPLANE_DB_APPLICATION_NAME": f"cacheplane-{self.name}", **env}
        self.process = subprocess.Popen(
            self.argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def forwarded_allow_ips() -> str:
    """uvicorn's ``--forwarded-allow-ips``: the proxies of ``CACHEPLANE_TRUSTED_PROXIES``
    (default none), never uvicorn's own default (127.0.0.1), under which any local client
    chooses its address with ``X-Forwarded-For`` (docs/identity.md, "Client address")."""
    from controlplane.env import env_list

    return ",".join(env_list("CACHEPLANE_TRUSTED_PROXIES", []))


#: uvicorn's ``--timeout-keep-alive``: above the idle timeout of the proxies and clients in
#: front of it (AWS ALB, nginx: 60 s), so the peer, not the server, closes an idle connection.
KEEP_ALIVE_SECONDS = 75


def core_children(*, python: str, host: str, port: int, logs: Path, data_dir: Path) -> list[Child]:
    """The system itself: the ASGI server, one Celery worker and Celery beat."""
    return [
        Child(
            "web",
            [
                python,
                "-m",
                "uvicorn",
                "controlplane.asgi:application",
                "--host",
                host,
                "--port",
                str(port),
                "--no-access-log",
                # Idle keep-alive connections outlive their clients' and proxies' (60 s
                # idle timeouts are common): uvicorn's 5 s default equals httpx's pool
                # expiry, and a request sent on a connection the server was closing
                # failed with a transport error (the soak saw 1 in 1,000).
                "--timeout-keep-alive",
                str(KEEP_ALIVE_SECONDS),
                # Explicit: uvicorn's default trusts X-Forwarded-For from 127.0.0.1.
                "--forwarded-allow-ips",
                forwarded_allow_ips(),
                "--log-level",
                "warning",
            ],
            logs / "web.log",
        ),
        Child(
            "celery-worker",
            [
                python,
                "-m",
                "celery",
                "-A",
                "controlplane",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
                "--hostname",
                f"cacheplane@{os.uname().nodename}",
            ],
            logs / "celery-worker.log",
        ),
        Child(
            "celery-beat",
            [
                python,
                "-m",
                "celery",
                "-A",
                "controlplane",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(data_dir / "celerybeat-schedule"),
            ],
            logs / "celery-beat.log",
        ),
    ]


def demo_providers(
    python: str, logs: Path, data_dir: Path, *, vertex_port: int = 0, worker_port: int = 0
) -> list[Child]:
    """Local stand-ins for providers, started only when no real ones are configured:
    a Vertex AI emulator when no GCP project is set, and one reference worker.

    A port of 0 is any free one (``cacheplane up --vertex-emulator-port/--worker-port``).
    """
    extra: list[Child] = []
    if not os.environ.get("CACHEPLANE_VERTEX_PROJECT") and not os.environ.get(
        "CACHEPLANE_VERTEX_BASE_URL"
    ):
        port = vertex_port or free_port()
        os.environ.update(
            {
                "CACHEPLANE_VERTEX_BASE_URL": f"http://127.0.0.1:{port}",
                "CACHEPLANE_VERTEX_STATIC_TOKEN": "demo-token",
                "CACHEPLANE_VERTEX_PROJECT": "cacheplane-demo",
                "CACHEPLANE_VERTEX_LOCATION": "us-central1",
            }
        )
        extra.append(
            Child(
                "vertex-emulator",
                [
                    python,
                    "-m",
                    "caches.providers.vertex_emulator",
                    "--port",
                    str(port),
                    "--state-file",
                    str(data_dir / "vertex-emulator.json"),
                    "--log-level",
                    "warning",
                ],
                logs / "vertex-emulator.log",
            )
        )
    if not os.environ.get("CACHEPLANE_NO_DEMO_WORKER"):
        port = worker_port or free_port()
        os.environ["CACHEPLANE_DEMO_WORKER_URL"] = f"http://127.0.0.1:{port}"
        extra.append(
            Child(
                "reference-worker",
                [
                    python,
                    "-m",
                    "workers.engine.cli",
                    "--port",
                    str(port),
                    "--served-model-name",
                    DEMO_WORKER_MODEL,
                    "--enable-prompt-tokens-details",
                    "--uvicorn-log-level",
                    "warning",
                ],
                logs / "reference-worker.log",
            )
        )
    return extra


def wait_ready(url: str, children: list[Child], timeout: float = 60.0) -> bool:
    """Poll ``/readyz`` until it answers 200; False once a child died or time is up."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(c.process is not None and c.process.poll() is not None for c in children):
            return False
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # polling a starting server
    return False


def wait_providers(children: list[Child], timeout: float = 60.0) -> None:
    """Wait until the local provider stand-ins answer their health checks.

    The demo creates caches on them right away; a Vertex emulator still binding its port
    made the first demo cache fail once. Bounded: past ``timeout`` the demo goes ahead
    (its cache follower re-creates a cache that failed) and a warning says which is late.
    """
    import httpx

    checks = {
        "vertex-emulator": f"{os.environ.get('CACHEPLANE_VERTEX_BASE_URL')}/_emulator/healthz",
        "reference-worker": f"{os.environ.get('CACHEPLANE_DEMO_WORKER_URL')}/health",
    }
    waiting = {c.name: checks[c.name] for c in children if c.name in checks}
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for name, url in list(waiting.items()):
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    del waiting[name]
            except httpx.HTTPError:
                pass
        if waiting:
            time.sleep(0.2)  # polling starting servers
    for name in waiting:
        print(f"cacheplane: {name} is not answering yet; the demo goes ahead", file=sys.stderr)
