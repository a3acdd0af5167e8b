"""Cache-aware prompt assembly and the volatile-content lint."""

from __future__ import annotations

from caches.content import CacheContent, content_lint


def test_equal_content_in_any_order_has_one_digest_and_one_prefix() -> None:
    a = CacheContent.from_dict(
        {
            "system_instruction": "Be terse.",
            "tools": [{"name": "b"}, {"name": "a"}],
            "documents": [
                {"id": "d2", "chunk": 1, "text": "x"},
                {"id": "d1", "chunk": 0, "text": "y"},
                {"id": "d2", "chunk": 0, "text": "z"},
            ],
        }
    )
    b = CacheContent.from_dict(
        {
            "system_instruction": "Be terse.",
            "tools": [{"name": "a"}, {"name": "b"}],
            "documents": [
                {"id": "d1", "chunk": 0, "text": "y"},
                {"id": "d2", "chunk": 0, "text": "z"},
                {"id": "d2", "chunk": 1, "text": "x"},
            ],
        }
    )
    assert a.digest() == b.digest()
    assert a.render_prefix() == b.render_prefix()
    prefix = a.render_prefix()
    assert prefix.index("<system>") < prefix.index("<tools>") < prefix.index('id="d1"')
    assert prefix.index('id="d2" chunk="0"') < prefix.index('id="d2" chunk="1"')


def test_any_content_change_changes_the_digest() -> None:
    base = {"system_instruction": "Be terse.", "documents": [{"id": "d", "text": "v1"}]}
    changed = {"system_instruction": "Be terse.", "documents": [{"id": "d", "text": "v2"}]}
    assert CacheContent.from_dict(base).digest() != CacheContent.from_dict(changed).digest()


def test_lint_flags_timestamps_uuids_and_session_ids_with_their_location() -> None:
    content = CacheContent.from_dict(
        {
            "system_instruction": "Current time: 2026-11-30T10:00:00Z. Be helpful.",
            "documents": [
                {
                    "id": "kb",
                    "text": "session_id: 9f8e7d trace 3fa85f64-5717-4562-b3fc-2c963f66afa6",
                }
            ],
        }
    )
    findings = content_lint(content)
    kinds = {(f.kind, f.location) for f in findings}
    assert ("timestamp", "system_instruction") in kinds
    assert ("uuid", "documents[kb#0]") in kinds
    assert ("session_id", "documents[kb#0]") in kinds
    assert not any(f.kind == "date" and f.location == "system_instruction" for f in findings)


def test_lint_is_quiet_on_stable_content() -> None:
    content = CacheContent.from_dict(
        {"system_instruction": "You answer questions about the employee handbook."}
    )
    assert content_lint(content) == []
