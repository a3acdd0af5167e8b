"""Gateway test constants (fixtures live in tests/conftest.py)."""

from __future__ import annotations

from tests.conftest import REF_MODEL as MODEL

__all__ = ["MODEL"]
