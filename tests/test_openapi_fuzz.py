"""Schemathesis against our OpenAPI schema: no 5xx, no response that breaks the schema.

Two passes: every operation on its own (stateless), then sequences of calls chained by
the links schemathesis infers (stateful), both deterministic and bounded in examples.

Every operation is fuzzed with a tenant admin's API key on a real tenant (so requests get
past authentication and into validation and services) and, for platform routes, with a
platform admin's session.
"""

from __future__ import annotations

import re

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import FlakyStrategyDefinition
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from controlplane.wsgi import application
from tenants.services import keys
from tests.factories import actor_for

schema = schemathesis.openapi.from_wsgi("/api/v1/schema", application)
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.fixture
def keep_test_connection():
    """As Django's test client does: the WSGI handler must not close the test transaction's
    connection at the end of each request."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.django_db
@pytest.mark.usefixtures("keep_test_connection")
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.label)
def test_operation_never_5xx_and_matches_schema(operation, tenant_a, admin_a, platform_admin):
    issued = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="fuzz")
    from django.test import Client

    session = Client()
    session.force_login(platform_admin)
    cookie = session.cookies["sessionid"].value
    statuses: list[int] = []

    @given(case=operation.as_strategy())
    @settings(
        max_examples=15,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(case) -> None:
        for name in ("tenant", "slug"):
            if name in (case.path_parameters or {}):
                case.path_parameters[name] = tenant_a.slug
        if operation.path.startswith("/api/v1/platform"):
            response = case.call(cookies={"sessionid": cookie})
        else:
            response = case.call(headers={"Authorization": f"Bearer {issued.plaintext}"})
        statuses.append(response.status_code)
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    run()
    fixed_params = {"tenant", "slug"}
    path_params = set(re.findall(r"{(\w+)}", operation.path))
    if operation.method.upper() == "GET" and path_params <= fixed_params:
        # Proves the fuzzing got past authentication and reached the views (detail routes
        # get random ids, so only collection reads are expected to succeed).
        assert any(status < 300 for status in statuses), statuses


#: Bounded so the stateful run stays around a minute on a busy machine; deterministic
#: (derandomize) so a failure reproduces.
STATEFUL_SCENARIOS = 40
STATEFUL_STEPS = 6
MIN_STATEFUL_CALLS = 150
REFUSALS = (401, 403, 429)  # the access boundary's and the limiter's answers


@pytest.mark.django_db
@pytest.mark.usefixtures("keep_test_connection")
def test_stateful_sequences_over_the_whole_api_never_5xx(tenant_a, admin_a, platform_admin):
    """Chains of calls (create → read → change → delete) with ids taken from responses.

    Schemathesis infers the links between operations from the schema (response fields
    feeding path parameters) and from Location headers, so sequences reach real objects
    instead of 404s. Only server errors fail this test: a chained call may legitimately
    answer 4xx (a cache already evicted, a stale etag).
    """
    from django.middleware.csrf import _get_new_csrf_string
    from django.test import Client

    issued = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="fuzz-sf")
    session = Client()
    session.force_login(platform_admin)
    cookie = session.cookies["sessionid"].value
    csrf = _get_new_csrf_string()
    seen: list[int] = []
    reached: set[tuple[str, int]] = set()

    class Workflow(schema.as_state_machine()):
        def before_call(self, case) -> None:
            # Tenant routes: the key's own tenant. Platform routes keep the slug a link
            # produced (a tenant created earlier in the sequence).
            if "tenant" in (case.path_parameters or {}):
                case.path_parameters["tenant"] = tenant_a.slug
            if case.operation.path.startswith("/api/v1/platform") and case.headers:
                # A generated bearer token would be tried (and refused) before the session.
                case.headers.pop("Authorization", None)

        def get_call_kwargs(self, case) -> dict:
            if case.operation.path.startswith("/api/v1/platform"):
                # Session writes need DRF's CSRF check to pass: the double-submit pair.
                return {
                    "cookies": {"sessionid": cookie, "csrftoken": csrf},
                    "headers": {"X-CSRFToken": csrf},
                }
            return {"headers": {"Authorization": f"Bearer {issued.plaintext}"}}

        def validate_response(self, response, case, additional_checks=None, **kwargs) -> None:
            seen.append(response.status_code)
            reached.add((case.operation.label, response.status_code))
            case.validate_response(response, checks=[not_a_server_error])

    # The database is state the generator cannot see (a bundle's object may be gone on a
    # replay), so Hypothesis may stop early with "inconsistent data generation". Every call
    # it made is in ``seen`` (a server error among them still fails below); a run cut
    # short is followed by one of a different sequence length (so other draws, still
    # derandomized) until the sequences made at least MIN_STATEFUL_CALLS calls.
    for steps in range(STATEFUL_STEPS, STATEFUL_STEPS + 4):
        try:
            Workflow.run(
                settings=settings(
                    max_examples=STATEFUL_SCENARIOS,
                    stateful_step_count=steps,
                    deadline=None,
                    database=None,
                    derandomize=True,
                    suppress_health_check=list(HealthCheck),
                )
            )
            break
        except FlakyStrategyDefinition:
            if len(seen) >= MIN_STATEFUL_CALLS:
                break
    assert seen and not [s for s in seen if s >= 500]
    # The sequences reached the views on both kinds of route, not only the access
    # boundary's refusals: a success, or a view's own answer (400 invalid input, 404 no
    # such object, 409). Which calls succeed depends on what earlier ones left: a sequence
    # may rewrite the key's own IAM policy or add a rate limit, refusing later calls.
    answered = {label for label, status in reached if status < 500 and status not in REFUSALS}
    assert any(" /api/v1/platform/" in label for label in answered), reached
    assert any(" /api/v1/tenants/" in label for label in answered), reached
