"""Rate-limit values beyond their columns' range are 400s, never 500s (REST and console)."""

from __future__ import annotations

import pytest

from gateway.models import RateLimit

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("requests_per_minute", 2**31),
        ("concurrent_requests", 2**31),
        ("requests_per_minute", 10**30),
        ("tokens_per_minute", 2**63),
        ("tokens_per_minute", 10**12 + 1),
    ],
)
def test_a_tenant_rate_limit_above_its_column_is_a_400_and_nothing_is_written(
    api, tenant_a, admin_a, field, value
) -> None:
    api.force_login(admin_a)
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/rate-limits", {field: value}, format="json"
    )
    assert response.status_code == 400, response.content
    assert not RateLimit.objects.filter(tenant=tenant_a).exists()


def test_the_largest_values_the_columns_hold_are_accepted(api, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/rate-limits",
        {"requests_per_minute": 2**31 - 1, "tokens_per_minute": 10**12},
        format="json",
    )
    assert response.status_code == 201, response.content


def test_the_console_form_refuses_a_request_limit_above_the_column() -> None:
    from frontend.forms import RateLimitEditForm

    form = RateLimitEditForm(data={"requests_per_minute": str(2**31)})
    assert not form.is_valid() and "requests_per_minute" in form.errors
