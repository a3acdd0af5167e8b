"""``/metrics`` for Prometheus, closed to anyone without the scrape token.

Gateway metrics carry a ``tenant`` label (each tenant's slug and traffic), so the page
is not public:

- ``CACHEPLANE_METRICS_TOKEN`` set: ``Authorization: Bearer <token>`` is required
  (401 ``metrics_token_required`` / ``invalid_metrics_token`` otherwise) and the full
  page is served;
- unset, development: served without the token, but with every sample that carries a
  tenant label removed;
- unset, production: nothing is served (403 ``metrics_token_not_configured``).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterator

import prometheus_client
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import multiprocess
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from controlplane.api.errors import error_body
from controlplane.task_health import background_jobs_metrics

# Label names that identify a tenant; a sample with any of them is tenant data.
TENANT_LABELS = frozenset({"tenant", "tenant_id", "tenant_slug"})


class _WithoutTenantLabels(Collector):
    """Every family of ``registry``, minus the samples labelled with a tenant."""

    def __init__(self, registry: Collector) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            samples = [s for s in family.samples if not TENANT_LABELS & set(s.labels)]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


class _WithBackgroundJobs(Collector):
    """Every family of ``registry``, plus the watched beat jobs' records from Redis."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()
        yield from background_jobs_metrics()


def _registry() -> prometheus_client.CollectorRegistry:
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ or "prometheus_multiproc_dir" in os.environ:
        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return prometheus_client.REGISTRY


def _refuse(status: int, code: str, message: str) -> JsonResponse:
    response = JsonResponse(error_body(code, message), status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="cacheplane-metrics"'
    return response


def _audit_invalid_token(request: HttpRequest) -> None:
    # Like API keys: a wrong credential is audited, a missing one is not (it is every
    # anonymous probe, and proves nothing about intent). Coalesced per source and window
    # (tenants.services.failures): a stream of wrong tokens is one row with a count.
    from audit.models import Outcome
    from tenants.actor import Actor
    from tenants.services.failures import failure_coalesced_record

    failure_coalesced_record(
        kind="metrics-token",
        actor=Actor.from_request(request),
        action="controlplane.metrics.scrape",
        outcome=Outcome.DENIED,
        target_type="endpoint",
        target_id="/metrics",
        details={"reason": "invalid_metrics_token"},
    )


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition, as the token configuration allows (see the module)."""
    token = settings.CACHEPLANE_METRICS_TOKEN
    registry = _WithBackgroundJobs(_registry())
    if token:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return _refuse(401, "metrics_token_required", "Send Authorization: Bearer <token>.")
        if not hmac.compare_digest(presented.strip().encode(), token.encode()):
            _audit_invalid_token(request)
            return _refuse(401, "invalid_metrics_token", "The metrics token is not valid.")
        source: Collector = registry
    elif settings.PRODUCTION:
        return _refuse(
            403,
            "metrics_token_not_configured",
            "Set CACHEPLANE_METRICS_TOKEN to scrape /metrics in production.",
        )
    else:
        source = _WithoutTenantLabels(registry)
    page = prometheus_client.generate_latest(source)
    return HttpResponse(page, content_type=prometheus_client.CONTENT_TYPE_LATEST)
