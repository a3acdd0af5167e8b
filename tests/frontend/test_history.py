"""Object history and the platform audit log: events with actor, time and a rendered
diff; filters; keyset paging; access through the one boundary."""

from __future__ import annotations

import pytest
from django.test import Client

from billing.services import budget_create, budget_update
from tests.factories import HumanFactory, actor_for, bind

pytestmark = pytest.mark.django_db


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_budgets_history_shows_the_edit_as_a_before_and_after_diff_by_actor(
    admin_a, tenant_a
) -> None:
    budget = budget_create(
        actor=actor_for(admin_a), tenant=tenant_a, name="monthly", period="month", limit_micros=5
    )
    budget_update(actor=actor_for(admin_a), budget=budget, changes={"limit_micros": 9_000_000})
    client = _login(admin_a)
    html = client.get(f"/t/{tenant_a.slug}/history/budget/{budget.pk}/").content.decode()
    row = html.split('data-field="limit_micros"')[1].split("</tr>")[0]
    assert "<del>5</del>" in row and "<ins>9000000</ins>" in row
    assert "billing.budget.update" in html and "alice" in html
    assert f'href="/t/{tenant_a.slug}/history/principal/{admin_a.pk}/"' in html  # the actor
    budgets = client.get(f"/t/{tenant_a.slug}/budgets/").content.decode()
    assert f"/t/{tenant_a.slug}/history/budget/{budget.pk}/" in budgets


def test_another_tenants_object_history_is_empty_and_an_unknown_kind_is_404(
    admin_a, tenant_a, tenant_b, admin_b
) -> None:
    budget = budget_create(
        actor=actor_for(admin_a), tenant=tenant_a, name="secret", period="month", limit_micros=5
    )
    html = _login(admin_b).get(f"/t/{tenant_b.slug}/history/budget/{budget.pk}/")
    assert html.status_code == 200 and "secret" not in html.content.decode()
    assert "No events." in html.content.decode()
    assert _login(admin_b).get(f"/t/{tenant_a.slug}/history/budget/{budget.pk}/").status_code == 404
    assert _login(admin_a).get(f"/t/{tenant_a.slug}/history/nonsense/1/").status_code == 404


def test_the_platform_audit_page_filters_and_pages_by_keyset(platform_admin, tenant_a, admin_a):
    from audit.event_pages import PAGE_SIZE

    for n in range(PAGE_SIZE + 5):
        budget_create(
            actor=actor_for(admin_a),
            tenant=tenant_a,
            name=f"b{n}",
            period="month",
            limit_micros=5,
        )
    client = _login(platform_admin)
    first = client.get("/platform/audit/", {"action": "billing.budget.create"}).content.decode()
    assert first.count('<tr data-event="') == PAGE_SIZE
    assert 'id="signing-keys-link"' in first
    assert 'id="audit-older"' in first
    nxt = first.split('" id="audit-older"')[0].rsplit('href="', 1)[1].replace("&amp;", "&")
    second = client.get(f"/platform/audit/{nxt}").content.decode()
    assert second.count('<tr data-event="') == 5 and 'id="audit-older"' not in second
    denied = client.get("/platform/audit/", {"outcome": "denied"}).content.decode()
    assert "billing.budget.create" not in denied
    by_actor = client.get("/platform/audit/", {"actor": "nobody-at-all"}).content.decode()
    assert "No events." in by_actor


def test_the_platform_audit_page_needs_the_platform_audit_permission(tenant_a, admin_a) -> None:
    assert _login(admin_a).get("/platform/audit/").status_code == 403
    auditor = HumanFactory()
    bind(auditor, "platform.auditor", None)
    assert _login(auditor).get("/platform/audit/").status_code == 200


def test_the_platform_audit_page_reads_a_page_in_a_fixed_number_of_queries(
    platform_admin, tenant_a, admin_a, django_assert_max_num_queries
) -> None:
    for n in range(60):
        budget_create(
            actor=actor_for(admin_a), tenant=tenant_a, name=f"b{n}", period="month", limit_micros=5
        )
    client = _login(platform_admin)
    client.get("/platform/audit/")  # warm the session and the access caches
    with django_assert_max_num_queries(12):
        assert client.get("/platform/audit/", {"action": "billing.*"}).status_code == 200
