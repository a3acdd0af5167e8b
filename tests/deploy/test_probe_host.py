"""Probes and scrapes reach a pod by IP: the Host the kubelet and Prometheus send is not in
ALLOWED_HOSTS, and only the three machine endpoints let it through."""

from __future__ import annotations

import pytest


@pytest.fixture
def listed_hosts_only(settings):
    settings.ALLOWED_HOSTS = ["cacheplane.example.com"]
    settings.CACHEPLANE_METRICS_TOKEN = "t" * 40


@pytest.mark.django_db
def test_probes_and_scrapes_answer_a_pod_ip_host(client, listed_hosts_only) -> None:
    assert client.get("/healthz", HTTP_HOST="10.1.2.3:8000").status_code == 200
    assert client.get("/readyz", HTTP_HOST="10.1.2.3:8000").status_code == 200
    scrape = client.get(
        "/metrics", HTTP_HOST="10.1.2.3:8000", HTTP_AUTHORIZATION="Bearer " + "t" * 40
    )
    assert scrape.status_code == 200
    assert b"django_http_requests_total_by_method_total" in scrape.content


@pytest.mark.django_db
def test_every_other_path_still_refuses_an_unlisted_host(client, listed_hosts_only) -> None:
    assert client.get("/api/v1/platform/tenants", HTTP_HOST="10.1.2.3:8000").status_code == 400
    assert client.get("/login/", HTTP_HOST="evil.example.net").status_code == 400
