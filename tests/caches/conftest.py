"""Content builders for cache tests (the Vertex emulator fixture is in tests/conftest.py)."""

from __future__ import annotations


def big_content(seed: str = "contract", *, documents: int = 2, words: int = 900) -> dict:
    """Content comfortably above gemini-2.5-flash's 1,024-token minimum."""
    return {
        "system_instruction": f"You are a careful legal assistant for {seed}.",
        "tools": [
            {"name": "search_clauses", "description": "Find clauses", "parameters": {}},
            {"name": "cite", "description": "Cite a clause", "parameters": {}},
        ],
        "documents": [
            {
                "id": f"{seed}-doc-{n}",
                "chunk": 0,
                "text": " ".join(f"clause{n}_{i}" for i in range(words)),
            }
            for n in range(documents)
        ],
    }
