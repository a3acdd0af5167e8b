"""Fixtures: a Vertex emulator wired into settings, content builders."""

from __future__ import annotations

import pytest

from caches.providers.vertex import forget_clients
from caches.providers.vertex_emulator.launcher import running_vertex_emulator


@pytest.fixture
def vertex(settings):
    """A running emulator that the control plane's Vertex provider talks to."""
    with running_vertex_emulator() as (base_url, emulator):
        settings.CACHEPLANE_VERTEX_BASE_URL = base_url
        settings.CACHEPLANE_VERTEX_STATIC_TOKEN = "test-token"
        settings.CACHEPLANE_VERTEX_PROJECT = "p1"
        settings.CACHEPLANE_VERTEX_LOCATION = "us-central1"
        settings.CACHEPLANE_PROVIDER_RETRY_INITIAL_DELAY = 0.01
        settings.CACHEPLANE_PROVIDER_TIMEOUT_SECONDS = 10
        forget_clients()
        emulator.base_url = base_url
        yield emulator
        forget_clients()


def big_content(seed: str = "contract", *, documents: int = 2, words: int = 900) -> dict:
    """Content comfortably above gemini-2.5-flash's 1,024-token minimum."""
    return {
        "system_instruction": f"You are a careful legal assistant for {seed}.",
        "tools": [
            {"name": "search_clauses", "description": "Find clauses", "parameters": {}},
            {"name": "cite", "description": "Cite a clause", "parameters": {}},
        ],
        "documents": [
            {"id": f"{seed}-doc-{n}", "chunk": 0,
             "text": " ".join(f"clause{n}_{i}" for i in range(words))}
            for n in range(documents)
        ],
    }  # fmt: skip
