"""The mypy ratchet: the strict set (``[tool.mypy] files`` in pyproject.toml) only grows.

Compares this checkout's list with the one committed on the merge base with main (on main
itself: the previous commit). Every baseline entry must still be covered, by itself or by
a parent package (``workers/engine`` is covered by ``workers``). Exit 1 names what was
dropped. Run by ``.ci/steps/20-mypy.sh`` before mypy itself.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def strict_set(pyproject_text: str) -> list[str]:
    """The checked paths of one pyproject.toml (empty before the ratchet existed)."""
    mypy = tomllib.loads(pyproject_text).get("tool", {}).get("mypy", {})
    return [str(entry).rstrip("/") for entry in mypy.get("files", [])]


def dropped(baseline: list[str], current: list[str]) -> list[str]:
    """Baseline entries that no current entry covers (itself or a parent folder)."""
    return [
        entry
        for entry in baseline
        if not any(entry == c or entry.startswith(c + "/") for c in current)
    ]


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def baseline_commit() -> str | None:
    """The merge base with origin/main (else main); HEAD^ when that is HEAD itself."""
    head = _git("rev-parse", "HEAD")
    for ref in ("origin/main", "main"):
        base = _git("merge-base", "HEAD", ref)
        if base is None:
            continue
        if base == head:
            return _git("rev-parse", "--verify", "-q", "HEAD^")
        return base
    return None


def main() -> int:
    current = strict_set((ROOT / "pyproject.toml").read_text())
    base = baseline_commit()
    text = _git("show", f"{base}:pyproject.toml") if base else None
    if text is None:
        print("mypy ratchet: no baseline commit to compare with; checking the list as is")
        return 0
    lost = dropped(strict_set(text), current)
    if lost:
        print(
            f"mypy ratchet: [tool.mypy] files dropped {', '.join(lost)} (present on "
            f"{base[:12]}). The strict set only grows: fix the type errors instead.",
            file=sys.stderr,
        )
        return 1
    print(f"mypy ratchet: {len(current)} strict entries, none dropped since {base[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
