"""/metrics: a bearer scrape token, or no tenant labels; nothing in production without one."""

from __future__ import annotations

import pytest
from django.test import Client

from audit.models import AuditEvent
from gateway.metering import REQUESTS

TOKEN = "metrics-scrape-token-0123456789abcdef"
SECRET_TENANT = "tenant-slug-nobody-may-list"


@pytest.fixture
def tenant_traffic():
    REQUESTS.labels(tenant=SECRET_TENANT, model="m", provider="vllm", status="ok").inc()


def test_without_a_token_development_serves_no_tenant_label(tenant_traffic, settings) -> None:
    settings.CACHEPLANE_METRICS_TOKEN = None
    response = Client().get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    assert "django_http_requests_total_by_method_total" in text
    assert SECRET_TENANT not in text
    assert 'tenant="' not in text


@pytest.mark.django_db
def test_with_a_token_the_bearer_is_required_and_a_wrong_one_is_audited(
    tenant_traffic, settings
) -> None:
    settings.CACHEPLANE_METRICS_TOKEN = TOKEN
    missing = Client().get("/metrics")
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "metrics_token_required"
    assert missing["WWW-Authenticate"].startswith("Bearer")
    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_metrics_token"
    assert SECRET_TENANT not in missing.content.decode() + wrong.content.decode()
    [row] = AuditEvent.objects.filter(action="controlplane.metrics.scrape")
    assert (row.outcome, row.details["reason"]) == ("denied", "invalid_metrics_token")
    assert row.details["failures"] == 1

    scraped = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert scraped.status_code == 200
    assert f'tenant="{SECRET_TENANT}"' in scraped.content.decode()


def test_production_without_a_token_serves_nothing(tenant_traffic, settings) -> None:
    settings.CACHEPLANE_METRICS_TOKEN = None
    settings.PRODUCTION = True
    response = Client().get("/metrics")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "metrics_token_not_configured"
    assert b"django_http" not in response.content
