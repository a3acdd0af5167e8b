"""Metering: Prometheus series per tenant and model, the usage ledger, cache hit counts.

Nothing here runs a SQL statement on the request path: usage goes through billing's
``usage_queue_append`` (its Redis queue, flushed in batches by a Celery task) and cache
hits to a Redis hash (folded into the cache rows by ``caches.tasks.cache_hits_flush_task``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

logger = logging.getLogger(__name__)

REQUESTS = Counter(
    "cacheplane_gateway_requests",
    "Gateway requests by outcome.",
    ["tenant", "model", "provider", "status"],
)
PROMPT_TOKENS = Counter("cacheplane_gateway_prompt_tokens", "Prompt tokens.", ["tenant", "model"])
CACHED_TOKENS = Counter(
    "cacheplane_gateway_cached_tokens", "Prompt tokens served from a cache.", ["tenant", "model"]
)
OUTPUT_TOKENS = Counter("cacheplane_gateway_output_tokens", "Output tokens.", ["tenant", "model"])
PREDICTED_HITS = Counter(
    "cacheplane_gateway_routing_predicted_hits",
    "Requests routed to a worker expected to hold their prefix.",
    ["tenant", "model"],
)
DELIVERED_HITS = Counter(
    "cacheplane_gateway_routing_delivered_hits",
    "Requests whose worker reported cached tokens.",
    ["tenant", "model"],
)
OVERHEAD = Histogram(
    "cacheplane_gateway_overhead_seconds",
    "Time spent in the gateway, upstream excluded.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
)
TTFT = Histogram(
    "cacheplane_gateway_ttft_seconds",
    "Time to first token seen by the gateway.",
    ["model"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


@dataclass
class Meter:
    """What one request used; filled in as the response passes through."""

    request_id: str
    tenant_id: str
    tenant_slug: str
    key_id: str
    principal_id: str
    provider: str
    model: str
    stream: bool
    started: float
    worker: str = ""
    pool: str = ""
    cache_id: str | None = None
    predicted_hit: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_5m_tokens: int = 0  # of prompt_tokens (Anthropic's cache writes)
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0
    audio_prompt_tokens: int = 0  # the audio parts of the three counts above
    audio_cached_tokens: int = 0
    audio_output_tokens: int = 0
    ttft_ms: int | None = None
    latency_ms: int | None = None
    status: str = "ok"
    available_tokens: int = 0  # reuse present in the prompt (a remembered prefix)
    routed_tokens: int = 0  # of which routing sent to the worker expected to hold it
    cost_micros: int | None = None  # the pipeline's price (None: no price found)
    extra: dict[str, Any] = field(default_factory=dict)
    client_request_id: str = ""  # the caller's X-Request-Id (``request_id`` is the ledger key)
    started_at: float | None = None  # wall clock at arrival: the ledger's occurred_at
    estimate_nanos: int | None = None  # no usage reported: this estimate is booked


_Metric = TypeVar("_Metric", bound=MetricWrapperBase)
_children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}


def _series(metric: _Metric, *label_values: str) -> _Metric:
    """``metric.labels(*label_values)``, looked up once per label set (labels() locks and
    builds its key on every call; the hot path needs only the child)."""
    key = (metric, label_values)
    child = _children.get(key)
    if child is None:
        if len(_children) > 100_000:  # label sets follow tenants x models: bounded anyway
            _children.clear()
        child = _children[key] = metric.labels(*label_values)
    return cast(_Metric, child)  # labels() returns a child of the metric's own class


def _observe(meter: Meter) -> None:
    tenant, model = meter.tenant_slug, meter.model
    _series(REQUESTS, tenant, model, meter.provider, meter.status).inc()
    _series(PROMPT_TOKENS, tenant, model).inc(meter.prompt_tokens)
    _series(CACHED_TOKENS, tenant, model).inc(meter.cached_tokens)
    _series(OUTPUT_TOKENS, tenant, model).inc(meter.output_tokens)
    if meter.predicted_hit:
        _series(PREDICTED_HITS, tenant, model).inc()
    if meter.cached_tokens:
        _series(DELIVERED_HITS, tenant, model).inc()
    if meter.ttft_ms is not None:
        _series(TTFT, model).observe(meter.ttft_ms / 1000)


def encode_usage(meters: Sequence[Meter]) -> tuple[list[bytes], list[Meter]]:
    """Observe each request's metrics and encode its usage message (billing's format)."""
    from billing.services.usage import AUTOPILOT_MAX_CHARS, ROUTE_MAX_CHARS, usage_message

    messages: list[bytes] = []
    recorded: list[Meter] = []
    for meter in meters:
        _observe(meter)
        try:
            messages.append(
                usage_message(
                    tenant_id=meter.tenant_id,
                    request_id=meter.request_id,
                    provider=meter.provider,
                    model=meter.model,
                    # The time of the work (its start), not of the flush or the finish:
                    # prices and budget periods apply at the moment the request ran.
                    occurred_at=datetime.fromtimestamp(meter.started_at, tz=UTC)
                    if meter.started_at
                    else datetime.now(tz=UTC),
                    client_request_id=meter.client_request_id,
                    estimate_nanos=meter.estimate_nanos,
                    prompt_tokens=meter.prompt_tokens,
                    cached_read_tokens=meter.cached_tokens,
                    cache_write_5m_tokens=meter.cache_write_5m_tokens,
                    cache_write_1h_tokens=meter.cache_write_1h_tokens,
                    output_tokens=meter.output_tokens,
                    audio_prompt_tokens=meter.audio_prompt_tokens,
                    audio_cached_read_tokens=meter.audio_cached_tokens,
                    audio_output_tokens=meter.audio_output_tokens,
                    ttft_ms=meter.ttft_ms,
                    latency_ms=meter.latency_ms,
                    status=meter.status,
                    api_key_id=meter.key_id,
                    principal_id=meter.principal_id,
                    cache_id=meter.cache_id,
                    worker=meter.worker,
                    pool=meter.pool,
                    stream=meter.stream,
                    # The cache autopilot's decision (``gateway.adapters``) reaches the
                    # ledger here, so the request log shows it; a longer one is cut.
                    autopilot=str(meter.extra.get("autopilot") or "")[:AUTOPILOT_MAX_CHARS],
                    # How the vLLM adapter placed it (``mode:reason``), for the same log.
                    route=str(meter.extra.get("route") or "")[:ROUTE_MAX_CHARS],
                )
            )
        except Exception:
            logger.exception("usage record dropped", extra={"request_id": meter.request_id})
            continue
        recorded.append(meter)
    return messages, recorded


def queue_usage(pipe: Any, messages: list[bytes], recorded: Sequence[Meter]) -> None:
    """The usage messages and the cache-hit counters, queued on one Redis pipeline."""
    from billing.services.usage import usage_queue_append
    from caches.services.hits import cache_hits_queue

    usage_queue_append(pipe, messages)
    for meter in recorded:
        if meter.cache_id:
            cache_hits_queue(pipe, cache_id=meter.cache_id, cached_tokens=meter.cached_tokens)


def write_direct(messages: list[bytes], recorded: Sequence[Meter]) -> None:
    """Redis refused the batch: the usage goes straight to the ledger (synchronous: the
    gateway runs it in a thread; idempotent, so a batch Redis did take in part is not
    booked twice). A request whose usage is invalid was already logged and dropped by
    :func:`encode_usage`; only if this fails too is a record logged and dropped."""
    from billing.services.usage import usage_write_direct

    logger.warning("usage queue unreachable; writing usage to the ledger directly")
    hits = sum(1 for meter in recorded if meter.cache_id)
    if hits:
        logger.warning("cache hit counters unreachable; %d hits not counted", hits)
    try:
        usage_write_direct(messages)
    except Exception:
        for meter in recorded:
            logger.exception("usage record dropped", extra={"request_id": meter.request_id})


def tick(recorded: Sequence[Meter]) -> None:
    """The live console's per-tenant counters (in memory; published once a second).

    A meter without ``cost_micros`` is a request the pipeline found no price for: it counts
    0 here, as the ledger books it. Pricing it again would query the database from the
    event loop (``SynchronousOnlyOperation`` once the price cache was cleared) and drop
    the tick.
    """
    from controlplane.live.usage import UsageDelta, usage_ticker

    for meter in recorded:
        try:
            cost = meter.cost_micros if meter.cost_micros is not None else 0
            usage_ticker.add(
                meter.tenant_id,
                UsageDelta(
                    requests=1,
                    prompt_tokens=meter.prompt_tokens,
                    cached_tokens=meter.cached_tokens,
                    available_tokens=meter.available_tokens,
                    routed_tokens=meter.routed_tokens,
                    output_tokens=meter.output_tokens,
                    cost_micros=cost,
                    errors=int(meter.status != "ok"),
                ),
            )
        except Exception:  # the ledger has the request; only the live tile misses it
            logger.exception("live usage tick dropped", extra={"request_id": meter.request_id})
