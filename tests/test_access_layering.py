"""The console is a leaf: no domain app imports ``frontend`` (live events go through
the neutral ``controlplane.live``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOMAIN_APPS = ("tenants", "caches", "billing", "workers", "gateway", "audit")


def _parsed(path: Path) -> ast.Module:
    """``ast.parse``, tried again on CPython 3.11's "AST constructor recursion depth
    mismatch": its recursion counter is shared by threads, and the suite's live server
    thread may compile a module at the same moment (python/cpython#106905)."""
    source = path.read_text()
    for attempt in range(3):
        try:
            return ast.parse(source, filename=str(path))
        except SystemError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute imports), at the top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_domain_app_imports_the_console() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for app in DOMAIN_APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        for name in imported_modules(path)
        if name == "frontend" or name.startswith("frontend.")
    ]
    assert offenders == []


def test_the_live_events_module_imports_no_app() -> None:
    for path in sorted((ROOT / "controlplane" / "live").rglob("*.py")):
        apps = {n.split(".")[0] for n in imported_modules(path)}
        assert not apps & {*DOMAIN_APPS, "frontend"}, path


def test_the_tenant_scoping_module_imports_no_model() -> None:
    """tenants.models imports tenants.scoping for its manager: scoping names the tenant
    model by label, so there is no cycle to hide inside a function."""
    imports = imported_modules(ROOT / "tenants" / "scoping.py")
    assert not {name for name in imports if name.split(".")[0] in {*DOMAIN_APPS, "frontend"}}
