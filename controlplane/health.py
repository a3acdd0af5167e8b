"""Liveness and readiness endpoints for orchestrators.

``/healthz`` says the process is up (no dependency is touched, so a database outage does
not get every pod restarted). ``/readyz`` says whether this instance can serve: 503 with
the name of each failing dependency.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from controlplane import ops


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Process is up."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Database, Redis and broker reachable; otherwise 503 naming what failed."""
    checks = ops.readiness()
    failed = {name: reason for name, reason in checks.items() if reason}
    body: dict[str, object] = {
        "status": "ok" if not failed else "unavailable",
        "checks": {name: (reason or "ok") for name, reason in checks.items()},
    }
    if failed:
        body["failed"] = sorted(failed)
    return JsonResponse(body, status=200 if not failed else 503)
