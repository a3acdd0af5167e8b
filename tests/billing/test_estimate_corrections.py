"""Correcting an estimated ledger row over REST (issue #23): a request booked at its
reservation (a timeout, a cut reasoning stream) gets the counts its provider reported,
through ``usage_estimate_correct`` and the one booking path.

``POST /api/v1/tenants/{t}/usage/{ledger_key}/correction`` needs ``budgets.update``
(billing admins, tenant admins, platform admins); it is audited
(``billing.usage.correct``, before/after of the row), a replay of the same counts
changes nothing, other counts on a row that is not an estimate are
``409 usage_not_estimated``, an unknown key ``404 usage_record_not_found``, impossible
counts ``400 invalid_usage``, a body of the wrong shape ``400 invalid_input``.

Prices (Gemini 2.5 Flash-Lite, seeded): input 100 n$ a token, audio input 300 n$, output
400 n$. Figures are nano-USD.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from billing.models import UsageRecord, UsageRollup
from billing.services import budget_create
from billing.services.budget_periods import budget_period_ensure
from billing.services.usage import usage_flush, usage_message, usage_record_many
from tests.billing.ledger_support import FLASH_LITE, figures
from tests.factories import HumanFactory, bind

pytestmark = pytest.mark.django_db
KEY = "gw-estimated-0001"
ESTIMATE = 7_000_000  # the request's 7,000 µ$ hold
CORRECTION = "billing.usage.correct"


@pytest.fixture
def commits(django_capture_on_commit_callbacks):
    """Run after-commit callbacks (the Redis mirror) as each block commits."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def estimated(tenant_a, actor, price_book, usage_queue, commits):
    """A timed-out gateway request of tenant A booked at its reservation, and the budget
    period it was charged to."""
    now = timezone.now()
    budget = budget_create(
        actor=actor, tenant=tenant_a, name="month", period="month", limit_micros=10**12
    )
    period = budget_period_ensure(budget=budget, at=now)
    with commits():
        usage_record_many(
            [
                usage_message(
                    tenant=tenant_a,
                    request_id=KEY,
                    provider="vertex",
                    model=FLASH_LITE,
                    occurred_at=now,
                    prompt_tokens=0,
                    status="upstream_timeout",
                    estimate_nanos=ESTIMATE,
                )
            ]
        )
        usage_flush()
    assert figures(period, at=now) == (ESTIMATE,) * 3
    return {"period": period, "at": now}


def _url(tenant) -> str:
    return f"/api/v1/tenants/{tenant.slug}/usage/{KEY}/correction"


def _corrections(tenant) -> int:
    return AuditEvent.objects.filter(tenant=tenant, action=CORRECTION, outcome="success").count()


def _billing_admin(tenant):
    user = HumanFactory()
    bind(user, "tenant.billingAdmin", tenant)
    return user


def test_a_billing_admin_corrects_an_estimate_and_every_figure_moves_by_the_difference(
    api, tenant_a, estimated, commits
):
    admin = _billing_admin(tenant_a)
    api.force_login(admin)
    reported = {"prompt_tokens": 1_000, "audio_prompt_tokens": 400, "output_tokens": 50}
    with commits():
        response = api.post(_url(tenant_a), reported, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    # 600 text × 100 + 400 audio × 300 + 50 × 400 = 200,000 n$.
    assert (body["estimated"], body["cost_nanos"], body["cost_micros"]) == (False, 200_000, 200)
    assert (body["prompt_tokens"], body["audio_prompt_tokens"], body["output_tokens"]) == (
        1_000,
        400,
        50,
    )
    # The budget (PostgreSQL and Redis) and the ledger agree, to the n$.
    assert figures(estimated["period"], at=estimated["at"]) == (200_000,) * 3
    # The rollups hold the reported counts and cost in place of the estimate's.
    for granularity in ("minute", "day"):
        rollup = UsageRollup.objects.get(tenant=tenant_a, granularity=granularity)
        assert (rollup.cost_nanos, rollup.prompt_tokens, rollup.audio_prompt_tokens) == (
            200_000,
            1_000,
            400,
        )
        assert (rollup.output_tokens, rollup.requests) == (50, 1)
    # Audited once, with who did it and the row's before/after.
    (event,) = AuditEvent.objects.filter(tenant=tenant_a, action=CORRECTION)
    assert event.actor_id == str(admin.pk) and event.target_id == KEY
    assert event.changes["cost_nanos"] == {"before": ESTIMATE, "after": 200_000}
    assert event.changes["estimated"] == {"before": True, "after": False}
    assert event.details["delta_nanos"] == 200_000 - ESTIMATE
    # The same report again: the row as it is, nothing booked or audited twice.
    with commits():
        again = api.post(_url(tenant_a), reported, format="json")
    assert again.status_code == 200 and again.json() == body
    assert _corrections(tenant_a) == 1
    # Other counts on a row that is no estimate any more: refused, nothing changes.
    with commits():
        other = api.post(_url(tenant_a), {**reported, "output_tokens": 51}, format="json")
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "usage_not_estimated"
    assert figures(estimated["period"], at=estimated["at"]) == (200_000,) * 3
    assert _corrections(tenant_a) == 1


def test_an_unknown_ledger_key_is_404_usage_record_not_found(api, tenant_a, admin_a, estimated):
    api.force_login(admin_a)
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/usage/gw-no-such-row/correction",
        {"prompt_tokens": 1, "output_tokens": 1},
        format="json",
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "usage_record_not_found"
    assert _corrections(tenant_a) == 0


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        pytest.param(
            {"prompt_tokens": 10, "cached_read_tokens": 11, "output_tokens": 1},
            "invalid_usage",
            id="cached_above_prompt",
        ),
        pytest.param(
            {"prompt_tokens": 10, "audio_prompt_tokens": 11, "output_tokens": 1},
            "invalid_usage",
            id="audio_above_prompt",
        ),
        pytest.param({"prompt_tokens": -1, "output_tokens": 1}, "invalid_usage", id="negative"),
        pytest.param(
            {"prompt_tokens": 2**31, "output_tokens": 1}, "invalid_usage", id="beyond_a_column"
        ),
        pytest.param(
            {"prompt_tokens": "many", "output_tokens": 1}, "invalid_input", id="not_a_number"
        ),
        pytest.param({"output_tokens": 1}, "invalid_input", id="prompt_missing"),
    ],
)
def test_impossible_counts_are_400_and_leave_the_estimate_as_it_was(
    api, tenant_a, admin_a, estimated, sent, code
):
    api.force_login(admin_a)
    response = api.post(_url(tenant_a), sent, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    row = UsageRecord.objects.get(tenant=tenant_a, request_id=KEY)
    assert (row.estimated, row.cost_nanos, row.prompt_tokens) == (True, ESTIMATE, 0)
    assert figures(estimated["period"], at=estimated["at"]) == (ESTIMATE,) * 3
    assert _corrections(tenant_a) == 0


def test_a_viewer_may_not_correct_and_a_platform_admin_may(
    api, tenant_a, platform_admin, estimated, commits
):
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    api.force_login(viewer)
    refused = api.post(_url(tenant_a), {"prompt_tokens": 5, "output_tokens": 0}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"
    (denial,) = AuditEvent.objects.filter(action=CORRECTION, outcome="denied")
    assert denial.actor_id == str(viewer.pk)
    assert UsageRecord.objects.get(tenant=tenant_a, request_id=KEY).estimated
    api.force_login(platform_admin)
    with commits():
        done = api.post(_url(tenant_a), {"prompt_tokens": 5, "output_tokens": 0}, format="json")
    assert done.status_code == 200
    assert (done.json()["estimated"], done.json()["cost_nanos"]) == (False, 500)
    assert figures(estimated["period"], at=estimated["at"]) == (500,) * 3
    (event,) = AuditEvent.objects.filter(tenant=tenant_a, action=CORRECTION, outcome="success")
    assert event.actor_id == str(platform_admin.pk)
