"""`.env.example` documents every environment variable the code reads.

The variables are found by reading the source (the typed helpers in
``controlplane/env.py`` and direct ``os.environ`` reads), so a new setting that is not
documented fails here rather than surprising an operator.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = (
    "controlplane",
    "tenants",
    "audit",
    "caches",
    "billing",
    "workers",
    "gateway",
    "frontend",
    "identity",
)
#: Read by the code but owned by other tools (documented by them, not by us).
FOREIGN = {
    "PATH",
    "HOME",
    "HOSTNAME",
    "CI",
    "DJANGO_SETTINGS_MODULE",
    "PYTEST_XDIST_WORKER",
    "PYTHONHASHSEED",
    "XDG_RUNTIME_DIR",
    "PROMETHEUS_MULTIPROC_DIR",
    "VLLM_SERVER_DEV_MODE",
}
_READS = re.compile(
    r"""(?:env_(?:str|bool|int|float|list|choice)\(\s*|os\.environ\.get\(\s*|"""
    r"""os\.getenv\(\s*|os\.environ\[\s*|environ\.setdefault\(\s*)["']([A-Z][A-Z0-9_]+)["'](?!\]\s*=[^=])"""
)


def _variables_read() -> set[str]:
    names: set[str] = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            names.update(_READS.findall(path.read_text(encoding="utf-8")))
    return names - FOREIGN


def _variables_documented() -> set[str]:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", text, flags=re.MULTILINE))


def test_every_variable_the_code_reads_is_documented_in_env_example():
    missing = sorted(_variables_read() - _variables_documented())
    assert not missing, f"add these to .env.example with a comment: {missing}"


def test_env_example_documents_no_variable_the_code_no_longer_reads():
    stale = sorted(_variables_documented() - _variables_read() - FOREIGN)
    assert not stale, f"remove these from .env.example (nothing reads them): {stale}"
