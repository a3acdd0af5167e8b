"""Health, readiness, metrics and request ids."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client, override_settings

from controlplane import ops
from controlplane.embedded import free_port


@pytest.fixture
def client() -> Client:
    return Client()


def test_healthz_answers_without_touching_dependencies(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_every_dependency_ok(client: Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "ok", "broker": "ok"}


@pytest.mark.django_db
def test_readyz_is_503_and_names_redis_when_redis_is_unreachable(client: Client) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    ops.redis_client.cache_clear()
    try:
        with override_settings(REDIS_URL=dead):
            response = client.get("/readyz")
    finally:
        ops.redis_client.cache_clear()
    assert response.status_code == 503
    body = response.json()
    assert "redis" in body["failed"]
    assert body["checks"]["database"] == "ok"
    assert "ConnectionError" in body["checks"]["redis"]


def test_metrics_endpoint_exposes_prometheus_text(client: Client) -> None:
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    assert "django_http_requests_total_by_method_total" in text


def test_request_id_is_echoed_when_well_formed_and_minted_otherwise(client: Client) -> None:
    kept = client.get("/healthz", HTTP_X_REQUEST_ID="trace-abcdef12")
    assert kept["X-Request-Id"] == "trace-abcdef12"
    replaced = client.get("/healthz", HTTP_X_REQUEST_ID="bad id with spaces\n")
    assert replaced["X-Request-Id"] != "bad id with spaces\n"
    assert len(replaced["X-Request-Id"]) == 32


def test_json_log_lines_carry_the_request_id() -> None:
    from controlplane.logging import JsonFormatter, RequestIdFilter
    from controlplane.request_context import reset_request_id, set_request_id

    formatter = JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s")
    record = logging.LogRecord("cacheplane.test", logging.INFO, __file__, 1, "hello", None, None)
    token = set_request_id("req-12345678")
    try:
        RequestIdFilter().filter(record)
    finally:
        reset_request_id(token)
    line = json.loads(formatter.format(record))
    assert line["request_id"] == "req-12345678"
    assert line["message"] == "hello"
