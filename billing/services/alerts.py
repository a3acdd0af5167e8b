"""Budget alert webhooks: a signed JSON POST per alert, delivered from a Celery task.

Signature: ``X-Cacheplane-Signature: sha256=<hex>``, the HMAC-SHA256 of the exact body
bytes under the budget's webhook secret (shown once when the budget is created or its
secret rotated). Receivers compare in constant time and may dedupe on
``X-Cacheplane-Delivery`` (the alert id, the same on every retry). The body carries
``sent_at`` so receivers can refuse stale replays.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from uuid import UUID

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing.models import BudgetAlert, WebhookState
from controlplane.outbound import DestinationRefused, IPAddress, address_is_public, post_pinned

WEBHOOK_MAX_ATTEMPTS = 6
SIGNATURE_HEADER = "X-Cacheplane-Signature"
EVENT = "billing.budget.threshold_crossed"
_RETRYABLE_STATUS = {408, 425, 429}


class WebhookTransientError(Exception):
    """The receiver could not take the alert now (network, 5xx, 429): retry later."""


def webhook_signature(*, secret: str, body: bytes) -> str:
    """The header value for ``body``: ``sha256=`` + hex HMAC-SHA256 under ``secret``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_verify(*, secret: str, body: bytes, header: str) -> bool:
    """What a receiver does: constant-time comparison of the expected signature."""
    return hmac.compare_digest(webhook_signature(secret=secret, body=body), header or "")


def webhook_body(alert: BudgetAlert) -> bytes:
    """The canonical JSON body of an alert (sorted keys, compact)."""
    budget, period = alert.budget, alert.period
    payload = {
        "type": EVENT,
        "id": str(alert.pk),
        "tenant": alert.tenant.slug,
        "budget": {"id": str(budget.pk), "name": budget.name, "period": budget.period},
        "period_start": period.period_start.isoformat(),
        "period_end": period.period_end.isoformat(),
        "threshold_percent": alert.threshold,
        "spent_micros": alert.spent_micros,
        "limit_micros": alert.limit_micros,
        "created_at": alert.created_at.isoformat(),
        "sent_at": timezone.now().isoformat(),
    }
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def _record(alert_id: UUID | str, **fields: object) -> None:
    with transaction.atomic():
        # all_tenants: the delivery task updates its alert row by id
        BudgetAlert.objects.all_tenants().filter(pk=alert_id).update(**fields)


def webhook_address_allowed(address: IPAddress) -> bool:
    """Whether a webhook may connect to ``address``.

    Unless ``CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE`` (off by default, development too), only
    public addresses: a tenant must not make the control plane call its own network
    (server-side request forgery). ``controlplane.outbound`` resolves the host once and
    connects to the address checked here (no second resolution, no rebinding window);
    redirects are never followed.
    """
    return settings.CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE or address_is_public(address)


def budget_alert_deliver(*, alert: BudgetAlert) -> str:
    """POST one alert to its budget's webhook; returns the resulting webhook state.

    Delivered or failed alerts (and alerts without a webhook) are left alone, so running
    this twice is a no-op. Network errors, 5xx, 408, 425 and 429 raise
    WebhookTransientError until ``WEBHOOK_MAX_ATTEMPTS`` attempts were made (the task
    retries with backoff); any other 4xx fails at once.
    """
    if alert.webhook_state != WebhookState.PENDING:
        return alert.webhook_state
    budget = alert.budget
    if not budget.webhook_url:
        _record(alert.pk, webhook_state=WebhookState.NONE)
        return WebhookState.NONE
    body = webhook_body(alert)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Cacheplane-Webhook/1",
        SIGNATURE_HEADER: webhook_signature(secret=budget.webhook_secret, body=body),
        "X-Cacheplane-Event": EVENT,
        "X-Cacheplane-Delivery": str(alert.pk),
    }
    attempts = alert.webhook_attempts + 1
    try:
        response = post_pinned(
            budget.webhook_url,
            content=body,
            headers=headers,
            timeout=settings.CACHEPLANE_BILLING_WEBHOOK_TIMEOUT_SECONDS,
            allowed=webhook_address_allowed,
        )
        error = "" if response.is_success else f"HTTP {response.status_code}"
        retryable = response.status_code >= 500 or response.status_code in _RETRYABLE_STATUS
    except DestinationRefused as refused:
        _record(
            alert.pk,
            webhook_state=WebhookState.FAILED,
            webhook_attempts=attempts,
            webhook_last_error=str(refused),
        )
        return WebhookState.FAILED
    except httpx.HTTPError as exc:
        error, retryable = f"{type(exc).__name__}: {exc}"[:500], True
    if not error:
        _record(
            alert.pk,
            webhook_state=WebhookState.DELIVERED,
            webhook_attempts=attempts,
            webhook_last_error="",
            webhook_delivered_at=timezone.now(),
        )
        return WebhookState.DELIVERED
    if retryable and attempts < WEBHOOK_MAX_ATTEMPTS:
        _record(alert.pk, webhook_attempts=attempts, webhook_last_error=error)
        raise WebhookTransientError(error)
    _record(
        alert.pk,
        webhook_state=WebhookState.FAILED,
        webhook_attempts=attempts,
        webhook_last_error=error,
    )
    return WebhookState.FAILED
