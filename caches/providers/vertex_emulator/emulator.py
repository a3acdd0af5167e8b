"""The emulator object: state, clock and knobs, plus the Python API tests drive it with.

One :class:`VertexEmulator` owns the cache store, the model table, the fault rules, the token
allow-list and the request log, and builds the Starlette app that serves them. Tests hold the
object (the in-process launcher yields it) and change its state directly; an out-of-process
emulator offers the same knobs under ``/_emulator/…`` (see ``control_api``).
"""

from __future__ import annotations

import copy
import os
import random
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .access import TokenAllowList
from .cached_contents import DEFAULT_MAX_INLINE_BYTES, CachedContentService
from .faults import FaultInjector, FaultRule, ReplyHold
from .model_catalog import ModelCatalog
from .request_log import RecordedRequest, RequestLog
from .store import CacheStore, StoredCache

if TYPE_CHECKING:
    from starlette.applications import Starlette

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """The real time, aware and in UTC."""
    return datetime.now(UTC)


class VertexEmulator:
    """A local stand-in for Vertex AI's cachedContents resource and generateContent.

    ``clock`` replaces the time source (it must return aware datetimes); ``advance_clock``
    shifts whatever it returns, so tests can expire caches without sleeping. ``id_seed`` makes
    the generated cache ids reproducible. ``min_cache_tokens`` replaces the model table of
    ``model_catalog``. ``state_file`` persists caches across restarts.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        min_cache_tokens: Mapping[str, int] | None = None,
        max_inline_bytes: int = DEFAULT_MAX_INLINE_BYTES,
        default_page_size: int = 100,
        state_file: str | os.PathLike[str] | None = None,
        tokens_by_project: Mapping[str, Iterable[str]] | None = None,
        id_seed: int | None = None,
    ) -> None:
        self._clock = clock or system_clock
        self._offset = timedelta(0)
        self._offset_lock = threading.Lock()
        self._ids: random.Random = (
            random.Random(id_seed) if id_seed is not None else (secrets.SystemRandom())
        )
        self.catalog = ModelCatalog(min_cache_tokens)
        self.store = CacheStore(state_file=state_file)
        self.faults = FaultInjector()
        self.allow_list = TokenAllowList(tokens_by_project)
        self.request_log = RequestLog()
        self.caches = CachedContentService(
            store=self.store,
            catalog=self.catalog,
            now=self.now,
            new_id=self._new_id,
            max_inline_bytes=max_inline_bytes,
            default_page_size=default_page_size,
        )
        self._app: Starlette | None = None
        self.blocked_terms: frozenset[str] = frozenset()

    # -- time ------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The emulator's current time: the clock plus any ``advance_clock`` offset."""
        moment = self._clock()
        if moment.tzinfo is None:
            raise ValueError("the emulator clock must return aware datetimes")
        with self._offset_lock:
            return moment + self._offset

    def advance_clock(self, delta: timedelta | float) -> datetime:
        """Move the emulator's time forward (seconds or a timedelta); returns the new now."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        with self._offset_lock:
            self._offset += step
        return self.now()

    def _new_id(self) -> str:
        # Vertex cache ids are 19-digit decimal numbers.
        return str(self._ids.randrange(10**18, 10**19))

    # -- app -------------------------------------------------------------------------------

    @property
    def app(self) -> Starlette:
        """The ASGI application serving this emulator (built once)."""
        if self._app is None:
            from .http_app import build_app

            self._app = build_app(self)
        return self._app

    # -- faults and latency ------------------------------------------------------------------

    def inject_fault(
        self,
        status: int,
        *,
        count: int | None = 1,
        methods: Iterable[str] | None = None,
        path_contains: str = "",
        message: str | None = None,
        wrap_in_array: bool = False,
    ) -> FaultRule:
        """Answer the next ``count`` matching requests with ``status`` (None: until cleared).

        429, 500 and 503 carry the spec's RESOURCE_EXHAUSTED / INTERNAL / UNAVAILABLE bodies
        unless ``message`` is given.
        """
        return self.faults.add(
            status,
            count=count,
            methods=methods,
            path_contains=path_contains,
            message=message,
            wrap_in_array=wrap_in_array,
        )

    def drop_replies(
        self,
        *,
        count: int | None = 1,
        methods: Iterable[str] | None = None,
        path_contains: str = "",
    ) -> FaultRule:
        """Let the next ``count`` matching requests take effect, then cut each connection in
        the middle of its reply: the client's transport error, as for a reply lost on the way.
        """
        return self.faults.add(
            0, count=count, methods=methods, path_contains=path_contains, drop_reply=True
        )

    def hold_replies(
        self, *, methods: Iterable[str] | None = None, path_contains: str = ""
    ) -> ReplyHold:
        """Hold the reply of the next matching request until the returned hold is released
        (the request has taken effect): orders two clients' calls without timing."""
        return self.faults.hold(methods=methods, path_contains=path_contains)

    def block_prompts_containing(self, *terms: str) -> None:
        """Answer a prompt whose last user text holds one of ``terms`` as Vertex answers a
        prompt its safety filters block (no terms: block nothing)."""
        self.blocked_terms = frozenset(terms)

    def clear_faults(self) -> None:
        """Drop every fault rule and the latency."""
        self.faults.clear()

    def set_latency(self, ms: int) -> None:
        """Delay every Google-path request by ``ms`` milliseconds (0 turns it off)."""
        self.faults.latency_ms = ms

    def set_reply_delay(self, ms: int) -> None:
        """Delay every reply by ``ms`` after the request took effect (0 turns it off)."""
        self.faults.reply_delay_ms = ms

    def set_stream_pacing(self, chunks: int, delay_ms: int) -> None:
        """Stream answers as ``chunks`` chunks ``delay_ms`` apart (a long generation that a
        client can walk away from mid-stream); ``(1, 0)`` restores the single chunk."""
        self.faults.stream_pacing = (chunks, delay_ms)

    # -- auth ------------------------------------------------------------------------------

    def allow_tokens(self, project: str, tokens: Iterable[str]) -> None:
        """Accept only these bearer tokens for ``project``; others get 403 PERMISSION_DENIED."""
        self.allow_list.allow(project, tokens)

    def clear_token_allow_list(self, project: str | None = None) -> None:
        """Accept any bearer token again, for one project or all."""
        self.allow_list.clear(project)

    # -- inspection ------------------------------------------------------------------------

    def requests(
        self, *, method: str | None = None, path_contains: str | None = None
    ) -> list[RecordedRequest]:
        """Requests received on Google paths, oldest first, optionally filtered."""
        return self.request_log.entries(method=method, path_contains=path_contains)

    def create_requests(self, *, succeeded_only: bool = False) -> list[RecordedRequest]:
        """The cachedContents create calls received (retries included), to count remote
        creates."""
        return [
            entry
            for entry in self.requests(method="POST")
            if entry.path.endswith("/cachedContents")
            and (not succeeded_only or entry.status == 200)
        ]

    def stored_caches(self, *, include_expired: bool = False) -> list[StoredCache]:
        """Copies of the stored caches with all their inputs (contents, systemInstruction,
        tools…), oldest first; copies, so a test cannot change the server's state by accident."""
        now = self.now()
        return [
            copy.deepcopy(record)
            for record in self.store.all_records()
            if include_expired or record.is_live(now)
        ]

    def stored_cache(self, name: str) -> StoredCache | None:
        """A copy of one live stored cache by full name, or ``None``."""
        record = self.store.get_live(name, self.now())
        return copy.deepcopy(record) if record is not None else None

    def state(self) -> dict[str, Any]:
        """A JSON-ready view of everything, for ``GET /_emulator/state``."""
        now = self.now()
        return {
            "now": now.isoformat(),
            "caches": [
                {**record.to_state(), "live": record.is_live(now)}
                for record in self.store.all_records()
            ],
            "faults": self.faults.snapshot(),
            "latency_ms": self.faults.latency_ms,
            "models": self.catalog.snapshot(),
            "token_allow_list": self.allow_list.snapshot(),
            "request_count": len(self.request_log.entries()),
            "max_inline_bytes": self.caches.max_inline_bytes,
        }

    def reset(self) -> None:
        """Forget caches, faults, latency, allow-lists, the request log and the clock offset.

        The model table and the clock callable are configuration and stay as they are.
        """
        self.store.clear()
        self.faults.clear()
        self.blocked_terms = frozenset()
        self.allow_list.clear()
        self.request_log.clear()
        with self._offset_lock:
            self._offset = timedelta(0)
