"""The one access boundary: same rules, same answers and an audit row on every entry point."""

from __future__ import annotations

import re

import pytest
from asgiref.sync import async_to_sync
from starlette.testclient import TestClient

from audit.models import AuditEvent, Outcome
from audit.services.denials import audit_denials_wait
from tenants.access import (
    MEMBER,
    ApiKeyNotAllowed,
    PermissionMissing,
    access_platform,
    access_tenant,
)
from tenants.errors import TenantNotFound, TenantSuspended
from tenants.models import TenantState
from tenants.services import keys
from tenants.services.tenants import tenant_set_state
from tests.factories import HumanFactory, ServiceAccountFactory, TenantFactory, actor_for, bind


def _denials(**filters) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(outcome=Outcome.DENIED, **filters).order_by("seq"))


@pytest.mark.django_db
def test_missing_and_forbidden_tenants_raise_the_same_error_and_both_are_audited(
    tenant_a, admin_b
) -> None:
    outcomes = []
    for ref in (tenant_a.slug, "no-such-tenant"):
        with pytest.raises(TenantNotFound) as caught:
            access_tenant(
                actor=actor_for(admin_b), tenant_ref=ref, permission="iam.get", action="t.x.get"
            )
        outcomes.append((caught.value.code, caught.value.message, caught.value.details))
    assert outcomes[0] == outcomes[1]
    # A non-member's probe is not the tenant's evidence: both rows on the platform chain.
    assert _denials(tenant=tenant_a) == []
    ghost = _denials(tenant__isnull=True, action="t.x.get")
    assert [(e.details["reason"], e.details["tenant_ref"]) for e in ghost] == [
        ("no_binding", tenant_a.slug),
        ("no_such_tenant", "no-such-tenant"),
    ]


_LITERAL = re.compile(r"'(?:[^']|'')*'|\"s\d+_x\d+\"|\b\d+\b")


def _statements(queries) -> list[str]:
    """The SQL a request ran, its literals masked (slugs, ids, times, hashes)."""
    return [_LITERAL.sub("?", q["sql"]) for q in queries]


def _row_shape(event: AuditEvent) -> tuple:
    """What an observer could compare between two denial rows, bar the reference."""
    return (
        event.chain,
        event.tenant_id,
        event.action,
        event.outcome,
        event.actor_id,
        event.auth_method,
        event.target_type,
        sorted(event.details),
        event.details["permission"],
    )


def _compare_paths(call, real: str, ghost: str) -> tuple:
    """Run ``call(real)`` and ``call(ghost)``: their SQL, answers and denial rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    call(real)  # warm per-process caches (content types, sessions) off the record
    call(ghost)
    seen = []
    for ref in (real, ghost):
        before = AuditEvent.objects.count()
        with CaptureQueriesContext(connection) as queries:
            answer = call(ref)
        new = list(AuditEvent.objects.order_by("-id")[: AuditEvent.objects.count() - before])
        seen.append((_statements(queries.captured_queries), answer, [_row_shape(e) for e in new]))
    return seen[0], seen[1]


def _same_body(real: bytes, ghost: bytes) -> None:
    import difflib

    lines = difflib.unified_diff(
        real.decode().splitlines(), ghost.decode().splitlines(), lineterm="", n=0
    )
    assert real == ghost, "\n".join(lines)


def _strip(body: bytes, *refs: str) -> bytes:
    for ref in refs:
        body = body.replace(ref.encode(), b"REF")
    body = re.sub(rb'name="csrfmiddlewaretoken" value="[^"]*"', b"", body)  # masked per request
    return re.sub(rb'"request_id": ?"[^"]*"', b"", body)


@pytest.mark.django_db
def test_missing_and_forbidden_run_the_same_sql_and_answer_alike_on_rest_and_console(
    api, tenant_a, admin_b
) -> None:
    """No existence oracle: the same statements (and as many), the same status and body,
    one denial row of the same shape, for a stranger's tenant and a missing one."""
    api.force_login(admin_b)
    ghost_slug = "no-such-tenant"
    for template in ("/api/v1/tenants/{}/iam-policy", "/t/{}/", "/t/{}/keys/"):

        def call(slug: str, template=template):
            response = api.get(template.format(slug))
            return response.status_code, _strip(response.content, tenant_a.slug, ghost_slug)

        real, ghost = _compare_paths(call, tenant_a.slug, ghost_slug)
        assert real[1][0] == 404, template
        assert real[0] == ghost[0], template  # identical SQL, statement for statement
        _same_body(real[1][1], ghost[1][1])
        assert real[1] == ghost[1], template
        assert len(real[2]) == 1 and real[2] == ghost[2], template


@pytest.mark.django_db
def test_another_tenants_object_and_a_missing_one_run_the_same_sql(
    api, tenant_a, tenant_b, admin_b
) -> None:
    from caches.models import CacheObject

    foreign = CacheObject.objects.create(
        tenant=tenant_a,
        name="a-cache",
        provider="vllm",
        model="m",
        content={},
        content_digest="a" * 64,
        ttl_seconds=600,
        state="active",
    )
    api.force_login(admin_b)
    missing = "00000000-0000-4000-8000-000000000000"
    for template in ("/api/v1/tenants/{}/caches/{}", "/t/{}/caches/{}/"):

        def call(cache_id: str, template=template):
            response = api.get(template.format(tenant_b.slug, cache_id))
            return response.status_code, _strip(response.content, cache_id)

        real, ghost = _compare_paths(call, str(foreign.pk), missing)
        assert real[1][0] == 404, template
        assert real[0] == ghost[0] and real[1] == ghost[1] and real[2] == ghost[2], template


@pytest.mark.django_db
def test_a_key_naming_another_tenant_or_a_missing_one_runs_the_same_sql(
    api, tenant_a, tenant_b, admin_b
) -> None:
    issued = keys.api_key_create(actor=actor_for(admin_b), tenant=tenant_b, name="b-key")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")

    def call(slug: str):
        response = api.get(f"/api/v1/tenants/{slug}/caches")
        return response.status_code, _strip(response.content, slug)

    real, ghost = _compare_paths(call, tenant_a.slug, "no-such-tenant")
    assert real[1][0] == 404
    assert real[0] == ghost[0] and real[1] == ghost[1] and real[2] == ghost[2]


@pytest.mark.django_db
def test_members_lacking_a_permission_get_403_and_an_audit_row(tenant_a) -> None:
    developer = HumanFactory()
    bind(developer, "tenant.developer", tenant_a)
    grant = access_tenant(
        actor=actor_for(developer), tenant_ref=tenant_a.slug, permission=MEMBER, action="t.x.get"
    )
    assert grant.allows("caches.get") and not grant.allows("usage.get")
    with pytest.raises(PermissionMissing):
        access_tenant(
            actor=actor_for(developer),
            tenant_ref=tenant_a.slug,
            permission="usage.get",
            action="billing.usage.get",
        )
    assert _denials(tenant=tenant_a)[0].details["reason"] == "missing_permission"


@pytest.mark.django_db
def test_an_api_key_is_refused_at_platform_scope(tenant_a, platform_admin) -> None:
    issued = keys.api_key_create(actor=actor_for(platform_admin), tenant=tenant_a, name="k")
    with pytest.raises(ApiKeyNotAllowed):
        access_platform(
            actor=actor_for(platform_admin),
            permission="tenants.list",
            action="p.x",
            api_key=issued.key,
        )
    assert _denials(tenant__isnull=True)[-1].details["reason"] == "api_key_on_platform_route"


@pytest.mark.django_db
def test_a_suspended_tenant_is_403_tenant_suspended_on_rest_and_console(
    api, tenant_a, admin_a, admin_b, platform_admin
) -> None:
    tenant_set_state(actor=actor_for(platform_admin), tenant=tenant_a, state=TenantState.SUSPENDED)
    api.force_login(admin_a)
    rest = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy")
    assert rest.status_code == 403 and rest.json()["error"]["code"] == "tenant_suspended"
    page = api.get(f"/t/{tenant_a.slug}/")
    assert page.status_code == 403 and b"suspended" in page.content
    with pytest.raises(TenantSuspended):
        access_tenant(
            actor=actor_for(admin_a), tenant_ref=tenant_a.slug, permission=MEMBER, action="x"
        )
    # A stranger still cannot tell that the tenant exists; platform operators keep access.
    api.force_login(admin_b)
    assert api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy").status_code == 404
    assert api.get(f"/t/{tenant_a.slug}/").status_code == 404
    api.force_login(platform_admin)
    assert api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy").status_code == 200
    reasons = [e.details["reason"] for e in _denials(tenant=tenant_a)]
    assert reasons == ["tenant_suspended", "tenant_suspended", "tenant_suspended"]
    strangers = _denials(tenant__isnull=True, details__tenant_ref=tenant_a.slug)
    assert [e.details["reason"] for e in strangers] == ["no_binding", "no_binding"]


@pytest.mark.django_db
def test_console_denials_are_audited_like_api_denials(api, tenant_a, admin_b) -> None:
    api.force_login(admin_b)
    assert api.get(f"/t/{tenant_a.slug}/").status_code == 404
    assert api.get("/t/no-such-tenant/").status_code == 404
    rows = _denials(tenant__isnull=True, action="frontend.page.view")
    assert [e.details["reason"] for e in rows] == ["no_binding", "no_such_tenant"]
    assert {e.actor_id for e in rows} == {str(admin_b.pk)}


@pytest.fixture
def gateway_client(fresh_gateway):
    from gateway.app import app

    with TestClient(app) as client:
        yield client


@pytest.mark.django_db(transaction=True)
def test_a_key_without_inference_invoke_is_refused_by_the_gateway_and_audited(
    gateway_client,
) -> None:
    tenant = TenantFactory()
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant)
    issued = keys.api_key_create(actor=actor_for(viewer), tenant=tenant, name="no-invoke")
    response = gateway_client.post(
        "/v1/chat/completions",
        headers={"Authorization": f"Bearer {issued.plaintext}"},
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    audit_denials_wait()
    (denial,) = _denials(tenant=tenant, action="gateway.inference.invoke")
    assert denial.key_id == str(issued.key.pk) and denial.details["reason"] == "missing_permission"


@pytest.mark.django_db(transaction=True)
def test_a_client_cache_salt_is_refused_by_the_gateway_and_audited(gateway_client) -> None:
    tenant = TenantFactory()
    robot = ServiceAccountFactory(tenant=tenant)
    admin = HumanFactory()
    bind(admin, "tenant.admin", tenant)
    bind(robot, "tenant.developer", tenant)
    issued = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="k", principal=robot)
    response = gateway_client.post(
        "/v1/chat/completions",
        headers={"Authorization": f"Bearer {issued.plaintext}"},
        json={"model": "m", "messages": [{"role": "user", "content": "x"}], "cache_salt": "v"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "cache_salt_not_allowed"
    audit_denials_wait()
    (denial,) = _denials(tenant=tenant, action="gateway.cache_salt.refuse")
    assert denial.actor_id == str(robot.pk) and denial.details["reason"] == "client_cache_salt"


@pytest.mark.django_db(transaction=True)
def test_the_gateway_identify_entry_point_goes_through_the_boundary() -> None:
    from gateway.errors import GatewayError
    from gateway.identity import forget_identities, identify
    from tenants.authentication import RequestSource

    forget_identities()
    tenant = TenantFactory()
    admin = HumanFactory()
    bind(admin, "tenant.admin", tenant)
    issued = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="k")
    source = RequestSource(ip="10.0.0.1", user_agent="t")
    identity = async_to_sync(identify)(f"Bearer {issued.plaintext}", source=source)
    assert identity.tenant_id == str(tenant.pk)
    forget_identities()
    from tenants.models import RoleBinding

    RoleBinding.objects.filter(principal=admin).delete()
    keys.key_cache.clear()
    with pytest.raises(GatewayError) as caught:
        async_to_sync(identify)(f"Bearer {issued.plaintext}", source=source)
    assert (caught.value.status, caught.value.code) == (404, "not_found")
    audit_denials_wait()
    (denial,) = _denials(tenant__isnull=True, action="gateway.inference.invoke")
    assert denial.source_ip == "10.0.0.1" and denial.details["reason"] == "no_binding"
    assert denial.details["tenant_ref"] == str(tenant.pk)
