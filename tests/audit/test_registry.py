"""Ratchets on audit fidelity: every field classified, every diff from the one helper."""

from __future__ import annotations

import ast
from pathlib import Path

from django.apps import apps

from audit.registry import AUDITED_MODELS

ROOT = Path(__file__).resolve().parents[2]
APP_DIRS = (
    "audit",
    "billing",
    "caches",
    "controlplane",
    "frontend",
    "gateway",
    "tenants",
    "workers",
)


def test_every_field_of_every_audited_model_is_classified_exactly_once() -> None:
    problems = []
    for label, declared in AUDITED_MODELS.items():
        model = apps.get_model(label)
        concrete = {f.name for f in model._meta.concrete_fields}
        groups = {
            "recorded": declared.recorded,
            "sensitive": declared.sensitive,
            "ignored": declared.ignored,
        }
        for group, names in groups.items():
            for name in sorted(names - concrete):
                problems.append(f"{label}.{name} ({group}) is not a field")
        seen: dict[str, str] = {}
        for group, names in groups.items():
            for name in names:
                if name in seen:
                    problems.append(f"{label}.{name} is both {seen[name]} and {group}")
                seen[name] = group
        for name in sorted(concrete - set(seen)):
            problems.append(f"{label}.{name} is not classified in audit/registry.py")
    assert problems == []


def _audit_record_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "audit_record":
                yield node


def test_every_audited_change_is_built_by_the_snapshot_diff() -> None:
    offenders = []
    for app in APP_DIRS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for call in _audit_record_calls(tree):
                for keyword in call.keywords:
                    if keyword.arg != "changes":
                        continue
                    value = keyword.value
                    is_diff = (
                        isinstance(value, ast.Call)
                        and getattr(value.func, "id", getattr(value.func, "attr", "")) == "diff"
                    )
                    if not is_diff:
                        offenders.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    # Use changes=diff(before, model_snapshot(obj)) from audit.snapshot instead.
    assert offenders == []
