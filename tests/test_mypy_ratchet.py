"""The mypy strict set: what it must contain, and the ratchet that keeps it from shrinking.

CI (``.ci/steps/20-mypy.sh``) runs mypy itself on the set; these tests are the cheap
half: the floor the set may never go below and the comparison the ratchet makes.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ["tenants", "audit", "billing", "gateway", "workers/engine"]


def _ratchet():
    spec = importlib.util.spec_from_file_location("mypy_ratchet", ROOT / ".ci" / "mypy_ratchet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def test_the_strict_set_covers_the_required_packages():
    ratchet = _ratchet()
    strict = ratchet.strict_set((ROOT / "pyproject.toml").read_text())
    assert ratchet.dropped(REQUIRED, strict) == []
    for entry in strict:
        assert (ROOT / entry).is_dir(), f"{entry} in [tool.mypy] files is not a package folder"


def test_the_strict_set_is_checked_strictly_without_escape_hatches():
    config = _config()
    assert config.get("strict") is True
    for override in _config().get("overrides", []):
        assert not override.get("ignore_errors"), f"ignore_errors in {override['module']}"


def test_the_ratchet_refuses_a_dropped_entry_and_accepts_a_parent():
    ratchet = _ratchet()
    baseline = ["audit", "workers/engine"]
    assert ratchet.dropped(baseline, ["audit", "workers/engine", "caches"]) == []
    assert ratchet.dropped(baseline, ["audit", "workers"]) == []  # the parent covers it
    assert ratchet.dropped(baseline, ["workers/engine"]) == ["audit"]
    assert ratchet.dropped(baseline, ["audit", "workers/engine_old"]) == ["workers/engine"]


def test_the_ratchet_reads_the_list_of_a_pyproject():
    ratchet = _ratchet()
    assert ratchet.strict_set('[tool.mypy]\nfiles = ["audit/", "gateway"]\n') == [
        "audit",
        "gateway",
    ]
    assert ratchet.strict_set("[tool.ruff]\nline-length = 100\n") == []
