"""Alert webhooks against a real local HTTP server: signed, delivered once, retried."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from billing.models import BudgetAlert, WebhookState
from billing.services import budget_create, budget_reserve, budget_settle
from billing.services.alerts import (
    SIGNATURE_HEADER,
    WebhookTransientError,
    budget_alert_deliver,
    webhook_verify,
)
from billing.tasks import budget_alert_deliver_task
from tests.billing.ledger_support import book_micros

pytestmark = pytest.mark.django_db


class Receiver:
    """A tiny webhook receiver: records each POST and answers with a scripted status."""

    def __init__(self) -> None:
        self.received: list[tuple[dict, bytes]] = []
        self.statuses: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/budget"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings):
    settings.CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on loopback
    with Receiver() as r:
        yield r


def _cross_threshold(tenant, admin, actor, url: str):
    budget = budget_create(
        actor=actor,
        tenant=tenant,
        name="b",
        period="month",
        limit_micros=1_000_000,
        thresholds=[50],
        webhook_url=url,
    )
    secret = budget.webhook_secret  # shown once, at creation
    hold = budget_reserve(tenant=tenant, principal=admin, estimate_micros=600_000, request_id="r1")
    budget_settle(reservation=hold, actual_micros=600_000)
    book_micros(tenant, 600_000)  # the spend, booked by the ledger
    return BudgetAlert.objects.all_tenants().select_related(
        "budget", "period", "tenant"
    ).get(), secret


def _cross_threshold_again(tenant, admin, actor, url: str):
    budget = budget_create(
        actor=actor,
        tenant=tenant,
        name="b2",
        period="day",
        limit_micros=1_000_000,
        thresholds=[10],
        webhook_url=url,
    )
    hold = budget_reserve(tenant=tenant, principal=admin, estimate_micros=0, request_id="r2")
    budget_settle(reservation=hold, actual_micros=200_000)
    book_micros(tenant, 200_000)
    return BudgetAlert.objects.all_tenants().select_related("budget", "period", "tenant").get(
        budget=budget
    ), budget.webhook_secret


def test_the_alert_webhook_is_signed_with_the_budget_secret_and_delivered_once(
    tenant_a, admin_a, actor, receiver, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        alert, secret = _cross_threshold(tenant_a, admin_a, actor, receiver.url)
    # After commit: the webhook delivery task, the live console events (tenant and
    # platform alerts topics), the spend mirrored onto the gateway's Redis counters and
    # the ledger's "usage booked" events (tenant and platform usage topics).
    deliveries = [c for c in callbacks if "budget_alert_deliver_task" in repr(c)]
    mirrors = [c for c in callbacks if "budget_live_book" in repr(c)]
    assert len(deliveries) == 1 and len(mirrors) == 1
    assert alert.webhook_state == WebhookState.PENDING
    assert budget_alert_deliver_task.apply(args=[str(alert.pk)]).result == "delivered"
    assert budget_alert_deliver_task.apply(args=[str(alert.pk)]).result == "delivered"
    assert len(receiver.received) == 1  # the second run was a no-op
    headers, body = receiver.received[0]
    assert webhook_verify(secret=secret, body=body, header=headers[SIGNATURE_HEADER])
    assert not webhook_verify(secret="whsec_wrong", body=body, header=headers[SIGNATURE_HEADER])
    assert headers["X-Cacheplane-Delivery"] == str(alert.pk)
    payload = json.loads(body)
    assert (payload["type"], payload["threshold_percent"], payload["spent_micros"]) == (
        "billing.budget.threshold_crossed",
        50,
        600_000,
    )
    assert payload["tenant"] == tenant_a.slug
    alert.refresh_from_db()
    assert alert.webhook_state == WebhookState.DELIVERED and alert.webhook_attempts == 1


def test_a_failing_receiver_is_retried_then_marked_failed(
    tenant_a, admin_a, actor, receiver
) -> None:
    alert, _ = _cross_threshold(tenant_a, admin_a, actor, receiver.url)
    receiver.statuses = [503, 429]
    for _ in range(2):
        with pytest.raises(WebhookTransientError):
            budget_alert_deliver(alert=alert)
        alert.refresh_from_db()
    assert (alert.webhook_state, alert.webhook_attempts) == (WebhookState.PENDING, 2)
    assert budget_alert_deliver(alert=alert) == WebhookState.DELIVERED
    receiver.statuses = [410]
    alert2, _ = _cross_threshold_again(tenant_a, admin_a, actor, receiver.url)
    assert budget_alert_deliver(alert=alert2) == WebhookState.FAILED  # 4xx: no retry


def test_an_unreachable_receiver_is_a_transient_error(tenant_a, admin_a, actor, settings) -> None:
    settings.CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE = True  # port 9 on loopback
    alert, _ = _cross_threshold(tenant_a, admin_a, actor, "http://127.0.0.1:9/unreachable")
    with pytest.raises(WebhookTransientError):
        budget_alert_deliver(alert=alert)
    alert.refresh_from_db()
    assert alert.webhook_attempts == 1 and "ConnectError" in alert.webhook_last_error


def test_webhooks_to_private_addresses_are_refused_unless_allowed(
    tenant_a, admin_a, actor, receiver, settings
) -> None:
    settings.CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE = False
    alert, _secret = _cross_threshold(tenant_a, admin_a, actor, receiver.url)
    assert budget_alert_deliver_task.apply(args=[str(alert.pk)]).result == "failed"
    alert.refresh_from_db()
    assert "not a public address" in alert.webhook_last_error
    assert receiver.received == []


def test_by_default_webhooks_to_internal_addresses_are_refused_in_development_too() -> None:
    from controlplane import settings_cacheplane, settings_deployment

    assert settings_deployment.PRODUCTION is False  # the test settings are development's
    assert settings_cacheplane.CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE is False
