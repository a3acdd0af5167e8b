"""A local emulator of Vertex AI's ``cachedContents`` REST resource and ``generateContent``.

Standalone (Starlette + uvicorn, no Django), speaking the wire protocol of
``shared/specs/vertex-context-cache.md`` §1 so that the real google-genai client works
against it. Start it in-process with :func:`running_vertex_emulator`, or as a process with
``python -m caches.providers.vertex_emulator --port N``.
"""

from .emulator import VertexEmulator, system_clock
from .faults import FaultRule
from .launcher import running_vertex_emulator
from .model_catalog import DEFAULT_MIN_CACHE_TOKENS, ModelCatalog
from .request_log import RecordedRequest, token_fingerprint
from .rpc_errors import RpcError
from .sdk_client import genai_client_for
from .store import StoredCache
from .token_estimator import (
    BYTES_PER_TOKEN,
    estimate_audio_tokens,
    estimate_cached_content_tokens,
    estimate_text_tokens,
)

__all__ = [
    "BYTES_PER_TOKEN",
    "DEFAULT_MIN_CACHE_TOKENS",
    "FaultRule",
    "ModelCatalog",
    "RecordedRequest",
    "RpcError",
    "StoredCache",
    "VertexEmulator",
    "estimate_cached_content_tokens",
    "estimate_audio_tokens",
    "estimate_text_tokens",
    "genai_client_for",
    "running_vertex_emulator",
    "system_clock",
    "token_fingerprint",
]
