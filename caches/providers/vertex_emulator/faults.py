"""Injected failures and latency, so tests can exercise retries, timeouts and outage handling.

A :class:`FaultRule` answers matching requests with an error instead of serving them, a given
number of times (or until cleared). Rules are checked in the order they were added and the
first match is consumed. Faults sit in front of authentication, like a front end that sheds
load before the service sees the request. A *dropped reply* rule instead lets the request take
effect and then cuts the connection in the middle of the reply (a reply lost on the way back:
the client sees its HTTP library's transport error, never a status).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .rpc_errors import RpcError, default_message_for, status_name_for


@dataclass
class FaultRule:
    """Answer matching requests with ``status`` for the next ``count`` matches.

    ``count=None`` means every match until cleared. ``methods`` empty matches every method;
    ``path_contains`` empty matches every path.
    """

    rule_id: int
    status: int
    count: int | None = 1
    methods: frozenset[str] = field(default_factory=frozenset)
    path_contains: str = ""
    message: str | None = None
    wrap_in_array: bool = False
    drop_reply: bool = False
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        """Whether this rule applies to a request."""
        if self.methods and method.upper() not in self.methods:
            return False
        return self.path_contains in path

    def to_error(self) -> RpcError:
        """The error body this rule sends (429/500/503 get the spec's texts by default)."""
        return RpcError(
            self.status,
            self.message or default_message_for(self.status),
            status=status_name_for(self.status),
            wrap_in_array=self.wrap_in_array,
        )

    def to_state(self) -> dict[str, Any]:
        """JSON-ready description, for the control endpoint."""
        return {
            "id": self.rule_id,
            "status": self.status,
            "count": self.count,
            "methods": sorted(self.methods),
            "path_contains": self.path_contains,
            "message": self.message,
            "wrap_in_array": self.wrap_in_array,
            "drop_reply": self.drop_reply,
            "hits": self.hits,
        }


@dataclass
class ReplyHold:
    """Keep the reply of the next matching request until :meth:`release` (it has already
    taken effect): lets a test order two clients' requests exactly, with no timing."""

    methods: frozenset[str]
    path_contains: str
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def matches(self, method: str, path: str) -> bool:
        """Whether this hold applies to a request."""
        if self.methods and method.upper() not in self.methods:
            return False
        return self.path_contains in path

    def wait_reached(self, timeout: float = 10.0) -> bool:
        """Block until a request is being held; whether one was."""
        return self.reached.wait(timeout)

    def release(self) -> None:
        """Let the held reply go."""
        self.released.set()


class FaultInjector:
    """The active fault rules and the artificial latency, shared across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._holds: list[ReplyHold] = []
        self._ids = itertools.count(1)
        self._latency_ms = 0
        self._reply_delay_ms = 0
        self._stream_pacing = (1, 0)

    def add(
        self,
        status: int,
        *,
        count: int | None = 1,
        methods: Iterable[str] | None = None,
        path_contains: str = "",
        message: str | None = None,
        wrap_in_array: bool = False,
        drop_reply: bool = False,
    ) -> FaultRule:
        """Register a rule; see :class:`FaultRule` for the matching semantics."""
        if not drop_reply and not 400 <= status <= 599:
            raise ValueError("fault status must be an HTTP error code (400-599)")
        if count is not None and count < 1:
            raise ValueError("fault count must be >= 1, or None for 'until cleared'")
        with self._lock:
            rule = FaultRule(
                rule_id=next(self._ids),
                status=status,
                count=count,
                methods=frozenset(method.upper() for method in methods or ()),
                path_contains=path_contains,
                message=message,
                wrap_in_array=wrap_in_array,
                drop_reply=drop_reply,
            )
            self._rules.append(rule)
            return rule

    def take(self, method: str, path: str) -> RpcError | None:
        """Consume the first matching error rule and return its error; ``None`` if none."""
        rule = self._consume(method, path, drop_reply=False)
        return rule.to_error() if rule is not None else None

    def hold(self, *, methods: Iterable[str] | None = None, path_contains: str = "") -> ReplyHold:
        """Hold the reply of the next matching request (see :class:`ReplyHold`)."""
        held = ReplyHold(
            methods=frozenset(method.upper() for method in methods or ()),
            path_contains=path_contains,
        )
        with self._lock:
            self._holds.append(held)
        return held

    def take_hold(self, method: str, path: str) -> ReplyHold | None:
        """Consume the first matching hold; ``None`` if none matches."""
        with self._lock:
            for held in self._holds:
                if held.matches(method, path):
                    self._holds.remove(held)
                    return held
        return None

    def take_dropped_reply(self, method: str, path: str) -> bool:
        """Consume the first matching dropped-reply rule; whether there was one."""
        return self._consume(method, path, drop_reply=True) is not None

    def _consume(self, method: str, path: str, *, drop_reply: bool) -> FaultRule | None:
        with self._lock:
            for rule in self._rules:
                if rule.drop_reply != drop_reply or not rule.matches(method, path):
                    continue
                rule.hits += 1
                if rule.count is not None:
                    rule.count -= 1
                    if rule.count == 0:
                        self._rules.remove(rule)
                return rule
        return None

    def clear(self) -> None:
        """Drop every rule and the latency."""
        with self._lock:
            self._rules.clear()
            for held in self._holds:
                held.release()
            self._holds.clear()
            self._latency_ms = 0
            self._reply_delay_ms = 0
            self._stream_pacing = (1, 0)

    @property
    def stream_pacing(self) -> tuple[int, int]:
        """(chunks, delay ms between them) of a streamed answer; (1, 0): one chunk."""
        with self._lock:
            return self._stream_pacing

    @stream_pacing.setter
    def stream_pacing(self, value: tuple[int, int]) -> None:
        chunks, delay_ms = value
        if chunks < 1 or delay_ms < 0:
            raise ValueError("stream pacing needs chunks >= 1 and a delay >= 0 ms")
        with self._lock:
            self._stream_pacing = (int(chunks), int(delay_ms))

    @property
    def latency_ms(self) -> int:
        """Milliseconds added before every Google-path request is handled."""
        with self._lock:
            return self._latency_ms

    @latency_ms.setter
    def latency_ms(self, value: int) -> None:
        if value < 0:
            raise ValueError("latency must be >= 0 ms")
        with self._lock:
            self._latency_ms = value

    @property
    def reply_delay_ms(self) -> int:
        """Milliseconds added after a request took effect, before its reply: models a
        caller that dies (or times out) after the remote change was made."""
        with self._lock:
            return self._reply_delay_ms

    @reply_delay_ms.setter
    def reply_delay_ms(self, value: int) -> None:
        if value < 0:
            raise ValueError("reply delay must be >= 0 ms")
        with self._lock:
            self._reply_delay_ms = value

    def snapshot(self) -> list[dict[str, Any]]:
        """The active rules, JSON-ready."""
        with self._lock:
            return [rule.to_state() for rule in self._rules]
