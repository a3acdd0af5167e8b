"""The request side of the usage ledger: validated messages appended to a Redis list.

One ``RPUSH`` per request (``usage_record``) or per batch (``usage_record_many``), no
SQL; ``billing.services.usage.flush`` moves them to PostgreSQL.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec

from billing.errors import InvalidUsage
from billing.models import Provider, UsageKind, UsageStatus
from billing.pricing import UsageCounts
from controlplane import ops
from controlplane.redis import keys
from tenants.models import Tenant

logger = logging.getLogger(__name__)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: ``UsageRecord.autopilot``'s and ``UsageRecord.route``'s column width.
AUTOPILOT_MAX_CHARS = 64
ROUTE_MAX_CHARS = 64


class _Message(msgspec.Struct, array_like=True):
    """One usage row on the wire (positional: small and fast to encode)."""

    tenant_id: str
    request_id: str
    at_us: int
    provider: str
    model: str
    worker: str
    pool: str
    api_key_id: str | None
    principal_id: str | None
    cache_id: str | None
    prompt_tokens: int
    cached_read_tokens: int
    cache_write_5m_tokens: int
    cache_write_1h_tokens: int
    output_tokens: int
    ttft_ms: int | None
    latency_ms: int | None
    status: str
    stream: bool
    # Appended later: defaults let messages queued by an older release still decode.
    thinking_tokens: int = 0
    audio_prompt_tokens: int = 0
    audio_cached_read_tokens: int = 0
    audio_output_tokens: int = 0
    kind: str = UsageKind.REQUEST
    ttl_seconds: int = 0
    client_request_id: str = ""
    # Not None: the row's cost is this estimate (the reservation of a request whose
    # usage the provider never reported), booked with ``estimated=True``.
    estimate_nanos: int | None = None
    # The cache autopilot's decision for the request ("" when it did not run).
    autopilot: str = ""
    # How the gateway routed it (``mode:reason``; "" when it was not routed).
    route: str = ""

    def counts(self) -> UsageCounts:
        return UsageCounts(
            self.prompt_tokens,
            self.cached_read_tokens,
            self.cache_write_5m_tokens,
            self.cache_write_1h_tokens,
            self.output_tokens,
            self.thinking_tokens,
            self.audio_prompt_tokens,
            self.audio_cached_read_tokens,
            self.audio_output_tokens,
        )


_encoder = msgspec.msgpack.Encoder()
# The choices' values, once: Django's ``Choices.values`` builds a new list on every call,
# which was a third of the gateway's per-request usage encoding.
_KINDS = frozenset(UsageKind.values)
_PROVIDERS = frozenset(Provider.values)
_STATUSES = frozenset(UsageStatus.values)
_decoder = msgspec.msgpack.Decoder(_Message)


def queue_key() -> str:
    return keys.usage_queue()


def _optional_uuid(name: str, value: object) -> str | None:
    if value is None or value == "":
        return None
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise InvalidUsage(f"{name} must be a UUID.", details={"field": name}) from None


def _optional_ms(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise InvalidUsage(f"{name} must be a non-negative integer.", details={"field": name})
    return value


def usage_message(
    *,
    tenant: Tenant | None = None,
    tenant_id: str | None = None,
    request_id: str,
    provider: str,
    model: str,
    occurred_at: datetime,
    prompt_tokens: int,
    cached_read_tokens: int = 0,
    cache_write_5m_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
    output_tokens: int = 0,
    ttft_ms: int | None = None,
    latency_ms: int | None = None,
    status: str = UsageStatus.OK,
    api_key_id: str | None = None,
    principal_id: str | None = None,
    cache_id: str | None = None,
    worker: str = "",
    pool: str = "",
    stream: bool = False,
    thinking_tokens: int = 0,
    audio_prompt_tokens: int = 0,
    audio_cached_read_tokens: int = 0,
    audio_output_tokens: int = 0,
    kind: str = UsageKind.REQUEST,
    ttl_seconds: int = 0,
    client_request_id: str = "",
    estimate_nanos: int | None = None,
    autopilot: str = "",
    route: str = "",
) -> bytes:
    """Validate one request's usage and encode it for the queue (no I/O).

    Partial work (an aborted or disconnected stream, an upstream error after tokens were
    produced) is recorded like any request, with the counts of what was streamed and a
    non-``ok`` status: the provider bills it, so the ledger prices it in full.
    ``kind="cache_create"`` books the write of an explicit cache (``ttl_seconds`` picks
    the write tier); see :func:`cache_creation_record`. The tenant is given as a row or,
    by a producer that has only its id (the gateway), as ``tenant_id``.

    ``request_id`` is the ledger key (idempotency: a replay books nothing); the
    producer mints it. A caller's own id (``X-Request-Id``) goes in
    ``client_request_id``, which is only stored. ``estimate_nanos`` books that cost
    instead of pricing the counts, flagged ``estimated`` for reconciliation.
    ``autopilot`` is the cache autopilot's decision, stored as is (at most 64 characters);
    ``route`` how the gateway placed the request (``exact:fresh``; at most 64).
    """
    counts = UsageCounts(
        prompt_tokens,
        cached_read_tokens,
        cache_write_5m_tokens,
        cache_write_1h_tokens,
        output_tokens,
        thinking_tokens,
        audio_prompt_tokens,
        audio_cached_read_tokens,
        audio_output_tokens,
    )
    problems = counts.problems()
    if any(
        v >= 2**31
        for v in (prompt_tokens, output_tokens, thinking_tokens, audio_output_tokens)
        if isinstance(v, int)
    ):
        problems.append("token counts must be below 2^31")
    if kind not in _KINDS:
        problems.append(f"unknown kind {kind!r}")
    if not isinstance(ttl_seconds, int) or isinstance(ttl_seconds, bool) or ttl_seconds < 0:
        problems.append("ttl_seconds must be a non-negative integer")
    if problems:
        raise InvalidUsage("; ".join(problems), details={"problems": problems})
    if provider not in _PROVIDERS:
        raise InvalidUsage(f"Unknown provider {provider!r}.", details={"provider": provider})
    if status not in _STATUSES:
        raise InvalidUsage(f"Unknown status {status!r}.", details={"status": status})
    if not request_id or len(request_id) > 128:
        raise InvalidUsage("request_id must be 1-128 characters.")
    if not isinstance(client_request_id, str) or len(client_request_id) > 128:
        raise InvalidUsage("client_request_id must be at most 128 characters.")
    if not isinstance(autopilot, str) or len(autopilot) > AUTOPILOT_MAX_CHARS:
        raise InvalidUsage(f"autopilot must be at most {AUTOPILOT_MAX_CHARS} characters.")
    if not isinstance(route, str) or len(route) > ROUTE_MAX_CHARS:
        raise InvalidUsage(f"route must be at most {ROUTE_MAX_CHARS} characters.")
    if estimate_nanos is not None and (
        not isinstance(estimate_nanos, int)
        or isinstance(estimate_nanos, bool)
        or estimate_nanos < 0
    ):
        raise InvalidUsage("estimate_nanos must be a non-negative integer.")
    if not model or len(model) > 200 or len(worker) > 200 or len(pool) > 100:
        raise InvalidUsage("model (1-200), worker (200) or pool (100) is too long.")
    if cache_id is not None and (not cache_id or len(str(cache_id)) > 100):
        raise InvalidUsage("cache_id must be 1-100 characters.")
    if occurred_at.tzinfo is None:
        raise InvalidUsage("occurred_at must be timezone-aware.")
    if (tenant is None) == (tenant_id is None):
        raise InvalidUsage("Give the tenant or its id (tenant_id), not both.")
    delta = occurred_at - EPOCH
    at_us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return _encoder.encode(
        _Message(
            str(tenant.pk) if tenant is not None else str(tenant_id),
            request_id,
            at_us,
            provider,
            model,
            worker,
            pool,
            _optional_uuid("api_key_id", api_key_id),
            _optional_uuid("principal_id", principal_id),
            None if cache_id is None else str(cache_id),
            prompt_tokens,
            cached_read_tokens,
            cache_write_5m_tokens,
            cache_write_1h_tokens,
            output_tokens,
            _optional_ms("ttft_ms", ttft_ms),
            _optional_ms("latency_ms", latency_ms),
            str(status),
            bool(stream),
            thinking_tokens,
            audio_prompt_tokens,
            audio_cached_read_tokens,
            audio_output_tokens,
            str(kind),
            ttl_seconds,
            client_request_id,
            estimate_nanos,
            autopilot,
            route,
        )
    )


def usage_record(**kwargs: Any) -> None:
    """Append one request's usage to the ledger queue (one Redis RPUSH, no SQL).

    Keyword-only, the arguments of :func:`usage_message`. Raises InvalidUsage for counts
    that cannot be true. The row reaches PostgreSQL at the next flush; replaying the same
    ``(tenant, request_id)`` is harmless.
    """
    ops.redis_client().rpush(queue_key(), usage_message(**kwargs))


def usage_record_many(messages: list[bytes]) -> None:
    """Append already-encoded messages in one round trip (batch producers, benchmarks)."""
    if messages:
        ops.redis_client().rpush(queue_key(), *messages)


def usage_queue_append(pipeline: Any, messages: list[bytes]) -> None:
    """Queue the append of encoded messages on a caller's Redis pipeline (sync or
    asyncio): an async producer (the gateway) books usage in the same round trip as its
    other counters, without a thread hop. Sent when the caller executes the pipeline."""
    if messages:
        pipeline.rpush(queue_key(), *messages)
