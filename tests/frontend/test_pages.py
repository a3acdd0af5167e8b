"""Console pages: rendering, permissions, isolation and query budgets (Django test client)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from caches.models import CacheObject
from tests.factories import HumanFactory, TenantFactory, bind

pytestmark = pytest.mark.django_db


def _cache(tenant, name="kb", state="active") -> CacheObject:
    return CacheObject.objects.create(
        tenant=tenant,
        name=name,
        provider="vllm",
        model="m",
        content={},
        content_digest=name.ljust(64, "0"),
        ttl_seconds=600,
        state=state,
    )


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_login_page_and_redirect_for_anonymous() -> None:
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert b"Log in" in Client().get("/login/").content


def test_platform_admin_lands_on_the_overview(platform_admin, tenant_a) -> None:
    client = _login(platform_admin)
    assert client.get("/")["Location"] == "/platform/"
    page = client.get("/platform/")
    assert page.status_code == 200 and b"Platform overview" in page.content
    assert tenant_a.display_name.encode() in page.content


def test_tenant_member_lands_on_its_tenant_and_cannot_open_platform(admin_a, tenant_a) -> None:
    client = _login(admin_a)
    assert client.get("/")["Location"] == f"/t/{tenant_a.slug}/"
    assert client.get("/platform/").status_code == 403
    assert AuditEvent.objects.filter(action="frontend.page.view", outcome="denied").exists()


def test_tenant_page_shows_caches_spend_members_and_actions_for_admins(admin_a, tenant_a):
    cache = _cache(tenant_a)
    client = _login(admin_a)
    page = client.get(f"/t/{tenant_a.slug}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Caches" in html and "kb" in html and "Spent this month" in html
    assert f"/t/{tenant_a.slug}/access/" in html  # members and bindings live on Access
    assert "Members and role bindings" in client.get(f"/t/{tenant_a.slug}/access/").content.decode()
    detail = client.get(f"/t/{tenant_a.slug}/caches/{cache.pk}/").content.decode()
    assert 'id="btn-evict"' in detail and 'id="btn-extend"' in detail


def test_viewer_sees_no_action_buttons_and_its_post_is_refused(tenant_a) -> None:
    cache = _cache(tenant_a)
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    client = _login(viewer)
    detail = client.get(f"/t/{tenant_a.slug}/caches/{cache.pk}/").content.decode()
    assert "btn-evict" not in detail and "btn-extend" not in detail
    response = client.post(
        f"/api/v1/tenants/{tenant_a.slug}/caches/{cache.pk}/evict",
        {},
        content_type="application/json",
    )
    assert response.status_code in (403, 404)
    cache.refresh_from_db()
    assert cache.state == "active"


def test_another_tenants_pages_are_404(admin_b, tenant_a) -> None:
    cache = _cache(tenant_a)
    client = _login(admin_b)
    for url in (
        f"/t/{tenant_a.slug}/",
        f"/t/{tenant_a.slug}/caches/{cache.pk}/",
        f"/t/{tenant_a.slug}/audit/",
        f"/t/{tenant_a.slug}/break-even/",
        f"/api/v1/tenants/{tenant_a.slug}/console/summary",
    ):
        assert client.get(url).status_code == 404, url
    own_page = client.get(f"/t/{admin_b.bindings.first().tenant.slug}/").content.decode()
    # Neither A's slug nor its display name ("Tenant-A") appears, e.g. in the switcher.
    assert tenant_a.slug not in own_page.lower()


def test_summary_json_sections_follow_permissions(tenant_a) -> None:
    dev = HumanFactory()
    bind(dev, "tenant.developer", tenant_a)
    data = _login(dev).get(f"/api/v1/tenants/{tenant_a.slug}/console/summary").json()
    assert "caches" in data and "spend" not in data and "members" not in data


def test_overview_query_count_is_bounded_with_many_tenants(platform_admin) -> None:
    for n in range(60):
        tenant = TenantFactory()
        if n % 3 == 0:
            _cache(tenant, name=f"c{n}")
    client = _login(platform_admin)
    client.get("/platform/")  # warm the session and permission caches
    with CaptureQueriesContext(connection) as few:
        client.get("/platform/")
    for _ in range(60):
        TenantFactory()
    with CaptureQueriesContext(connection) as more:
        response = client.get("/platform/")
    assert response.status_code == 200
    assert len(more) == len(few) <= 25


def test_workers_audit_and_breakeven_pages_render(platform_admin, admin_a, tenant_a) -> None:
    assert _login(platform_admin).get("/platform/workers/").status_code == 200
    client = _login(admin_a)
    assert b"Audit log" in client.get(f"/t/{tenant_a.slug}/audit/").content
    assert b"Break-even calculator" in client.get(f"/t/{tenant_a.slug}/break-even/").content


def test_workers_page_shows_pinned_prefixes_per_tenant_against_capacity(platform_admin, tenant_a):
    from workers.models import Worker

    Worker.objects.create(
        name="w-a", base_url="http://w-a:8000", model="m", block_size=16, num_blocks=100
    )
    c = _cache(tenant_a, name="pinned")
    c.placement, c.token_count = ["w-a"], 320
    c.save()
    client = _login(platform_admin)
    with CaptureQueriesContext(connection) as queries:
        html = client.get("/platform/workers/").content.decode()
    assert "1600" in html and f"{tenant_a.slug}: 320 tokens in 1 cache" in html
    assert len(queries) <= 15


def test_console_summary_page_zero_is_not_an_error(platform_admin) -> None:
    response = _login(platform_admin).get("/api/v1/platform/console/summary?page=0")
    assert response.status_code == 200 and response.json()["page"] == 1


@pytest.mark.parametrize("page", ["99999999999999999999999999", "9223372036854775807", "0", "-3"])
def test_a_huge_or_odd_platform_page_shows_a_real_page(platform_admin, tenant_a, page) -> None:
    response = _login(platform_admin).get("/platform/", {"page": page})
    assert response.status_code == 200
    assert tenant_a.display_name.encode() in response.content  # clamped to the last page
