"""Which Gemini models the emulator serves, and each one's minimum cacheable token count.

The minimums conflict across Google's documents (spec §1.8), so they are configuration, not
truth. The defaults follow what the real service was *observed* to enforce where there is an
observation, and the current docs otherwise:

==========================  ======  ==========================================================
model                       min     source (spec §1.8)
==========================  ======  ==========================================================
gemini-2.5-flash             1024   observed on Vertex (public test fixture) and Developer API
gemini-2.5-pro               2048   Vertex and Developer API docs
gemini-2.5-flash-lite        2048   enforced on the Developer API (discuss t/178942)
gemini-2.0-flash             2048   Vertex overview (2.0 and 2.5: 2,048)
gemini-2.0-flash-lite        2048   same row of the Vertex overview
gemini-3-flash-preview       4096   observed ("gemini-3-flash", 4,096) and Vertex docs
gemini-3.1-pro-preview       1024   observed on Vertex (discuss t/134499), below the docs
gemini-3.5-flash             4096   observed on Vertex (google/adk-python#5847)
==========================  ======  ==========================================================

A versioned id such as ``gemini-2.0-flash-001`` resolves to its base entry.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

DEFAULT_MIN_CACHE_TOKENS: Mapping[str, int] = MappingProxyType(
    {
        "gemini-2.5-flash": 1024,
        "gemini-2.5-pro": 2048,
        "gemini-2.5-flash-lite": 2048,
        "gemini-2.0-flash": 2048,
        "gemini-2.0-flash-lite": 2048,
        "gemini-3-flash-preview": 4096,
        "gemini-3.1-pro-preview": 1024,
        "gemini-3.5-flash": 4096,
    }
)

_MODEL_NAME_RE = re.compile(
    r"^projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
    r"/publishers/google/models/(?P<model_id>[^/:@]+)$"
)
_VERSION_SUFFIX_RE = re.compile(r"-\d{3}$")


@dataclass(frozen=True)
class ModelName:
    """A parsed ``projects/{p}/locations/{l}/publishers/google/models/{id}`` name."""

    project: str
    location: str
    model_id: str

    @property
    def full(self) -> str:
        """The full resource name, as Vertex echoes it back in ``CachedContent.model``."""
        return (
            f"projects/{self.project}/locations/{self.location}"
            f"/publishers/google/models/{self.model_id}"
        )


def parse_model_name(value: str) -> ModelName | None:
    """Parse a full publisher-model resource name; ``None`` for any other form."""
    match = _MODEL_NAME_RE.match(value)
    if match is None:
        return None
    return ModelName(**match.groupdict())


class ModelCatalog:
    """A thread-safe table of known model ids and their minimum cacheable token counts."""

    def __init__(self, min_cache_tokens: Mapping[str, int] | None = None) -> None:
        source = DEFAULT_MIN_CACHE_TOKENS if min_cache_tokens is None else min_cache_tokens
        self._lock = threading.Lock()
        self._min_tokens: dict[str, int] = dict(source)

    def min_cache_tokens(self, model_id: str) -> int | None:
        """The minimum for a model id (a ``-NNN`` version falls back to its base); ``None``
        when the model is unknown."""
        with self._lock:
            if model_id in self._min_tokens:
                return self._min_tokens[model_id]
            return self._min_tokens.get(_VERSION_SUFFIX_RE.sub("", model_id))

    def is_known(self, model_id: str) -> bool:
        """Whether the emulator serves this model id."""
        return self.min_cache_tokens(model_id) is not None

    def set_model(self, model_id: str, min_cache_tokens: int) -> None:
        """Add a model or change its minimum (tests use this to model a new Gemini release)."""
        if min_cache_tokens < 0:
            raise ValueError("min_cache_tokens must be >= 0")
        with self._lock:
            self._min_tokens[model_id] = min_cache_tokens

    def snapshot(self) -> dict[str, int]:
        """A copy of the table, for ``/_emulator/state``."""
        with self._lock:
            return dict(self._min_tokens)
