"""IAM API contract: status codes, error shapes, audit of denials, nothing written on bad input."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from tenants.models import ApiKey, Principal, Role, RoleBinding, Tenant
from tenants.services import keys
from tests.factories import HumanFactory, ServiceAccountFactory, actor_for, bind

pytestmark = pytest.mark.django_db


def _error(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message", "details", "request_id"} <= set(body["error"])
    return body["error"]


def test_unauthenticated_requests_get_401_with_bearer_challenge(api, tenant_a) -> None:
    response = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy")
    assert response.status_code == 401
    assert _error(response)["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_policy_round_trip_over_the_api(api, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    dev = HumanFactory()
    policy = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy").json()
    bindings = [{"role": b["role"], "principal": b["principal"]} for b in policy["bindings"]]
    bindings.append({"role": "tenant.developer", "principal": str(dev.pk)})
    response = api.put(
        f"/api/v1/tenants/{tenant_a.slug}/iam-policy",
        {"etag": policy["etag"], "bindings": bindings},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["etag"] != policy["etag"]
    stale = api.put(
        f"/api/v1/tenants/{tenant_a.slug}/iam-policy",
        {"etag": policy["etag"], "bindings": bindings},
        format="json",
    )
    assert stale.status_code == 409
    assert _error(stale)["code"] == "etag_mismatch"


def test_test_permissions_returns_the_held_subset(api, tenant_a) -> None:
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    api.force_login(viewer)
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/iam-policy/test-permissions",
        {"permissions": ["caches.get", "caches.delete", "iam.get"]},
        format="json",
    )
    assert response.status_code == 200
    assert response.json() == {"permissions": ["caches.get", "iam.get"]}
    bad = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/iam-policy/test-permissions",
        {"permissions": ["caches.teleport"]},
        format="json",
    )
    assert bad.status_code == 400 and _error(bad)["code"] == "unknown_permission"


def test_viewer_gets_403_and_the_denial_is_audited(api, tenant_a) -> None:
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    api.force_login(viewer)
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/service-accounts", {"name": "bot"}, format="json"
    )
    assert response.status_code == 403
    assert _error(response)["code"] == "permission_denied"
    denial = AuditEvent.objects.get(outcome="denied")
    assert denial.action == "tenants.service_account.create"
    assert denial.tenant == tenant_a and denial.actor_name == viewer.username
    assert denial.details["permission"] == "iam.set"
    assert not Principal.objects.filter(kind="service").exists()


def test_key_is_shown_once_and_authenticates_bearer_requests(api, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    sa = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/service-accounts", {"name": "ci-bot"}, format="json"
    ).json()
    bind(Principal.objects.get(pk=sa["id"]), "tenant.viewer", tenant_a)
    created = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/keys",
        {"name": "ci", "principal": sa["id"]},
        format="json",
    )
    assert created.status_code == 201
    assert created["Cache-Control"] == "no-store"
    secret = created.json()["key"]
    listed = api.get(f"/api/v1/tenants/{tenant_a.slug}/keys").json()
    assert secret not in str(listed) and listed["results"][0]["prefix"] == secret[:12]
    api.logout()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    policy = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy")
    assert policy.status_code == 200
    # A viewer key cannot mint keys.
    assert (
        api.post(f"/api/v1/tenants/{tenant_a.slug}/keys", {"name": "x"}, format="json").status_code
        == 403
    )


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("Bearer cpk_nope", "invalid_api_key"),
        ("Bearer " + "cpk_" + "A" * 38, "invalid_api_key"),
        ("Bearer a b", "invalid_api_key"),
    ],
)
def test_bad_keys_get_401_with_code_and_are_audited(api, tenant_a, header, code) -> None:
    api.credentials(HTTP_AUTHORIZATION=header)
    response = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy")
    assert response.status_code == 401
    assert _error(response)["code"] == code
    if header != "Bearer a b":
        failure = AuditEvent.objects.get(action="tenants.api_key.authenticate")
        assert failure.outcome == "failed" and failure.details["reason"] == code
        assert "cpk_" + "A" * 38 not in str(failure.details)


def test_revoked_key_gets_401_api_key_revoked(api, tenant_a, admin_a) -> None:
    issued = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="x")
    keys.api_key_revoke(actor=actor_for(admin_a), tenant=tenant_a, key_id=str(issued.key.pk))
    keys.key_cache.clear()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")
    response = api.get(f"/api/v1/tenants/{tenant_a.slug}")
    assert response.status_code == 401 and _error(response)["code"] == "api_key_revoked"


def test_suspended_tenant_key_gets_403_tenant_suspended(
    api, tenant_a, admin_a, platform_admin
) -> None:
    issued = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="x")
    api.force_login(platform_admin)
    assert (
        api.post(f"/api/v1/platform/tenants/{tenant_a.slug}/suspend", {}, format="json").status_code
        == 200
    )
    api.logout()
    keys.key_cache.clear()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")
    response = api.get(f"/api/v1/tenants/{tenant_a.slug}")
    assert response.status_code == 403 and _error(response)["code"] == "tenant_suspended"
    api.credentials()
    api.force_login(admin_a)
    session = api.get(f"/api/v1/tenants/{tenant_a.slug}")
    assert session.status_code == 403 and _error(session)["code"] == "tenant_suspended"


def test_platform_tenant_lifecycle_and_duplicate_slug(api, platform_admin) -> None:
    api.force_login(platform_admin)
    first = api.post(
        "/api/v1/platform/tenants", {"slug": "new-co", "display_name": "New"}, format="json"
    )
    assert first.status_code == 201
    dup = api.post(
        "/api/v1/platform/tenants", {"slug": "new-co", "display_name": "Again"}, format="json"
    )
    assert dup.status_code == 409 and _error(dup)["code"] == "duplicate_name"
    bad = api.post(
        "/api/v1/platform/tenants", {"slug": "Bad Slug!", "display_name": "x"}, format="json"
    )
    assert bad.status_code == 400 and _error(bad)["code"] == "invalid_input"
    assert Tenant.objects.filter(slug__in=["new-co"]).count() == 1
    patched = api.patch(
        "/api/v1/platform/tenants/new-co", {"display_name": "Renamed"}, format="json"
    )
    assert patched.json()["display_name"] == "Renamed"


def test_tenant_admin_cannot_use_platform_routes(api, admin_a) -> None:
    api.force_login(admin_a)
    response = api.post(
        "/api/v1/platform/tenants", {"slug": "x-co", "display_name": "X"}, format="json"
    )
    assert response.status_code == 403
    assert not Tenant.objects.filter(slug="x-co").exists()


def test_malformed_json_and_oversized_body_are_clear_4xx(api, tenant_a, admin_a, settings) -> None:
    api.force_login(admin_a)
    url = f"/api/v1/tenants/{tenant_a.slug}/roles"
    broken = api.generic("POST", url, '{"name": ', content_type="application/json")
    assert broken.status_code == 400 and _error(broken)["code"] == "invalid_json"
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    huge = api.post(
        url, {"name": "big", "title": "x" * 5000, "permissions": ["caches.get"]}, format="json"
    )
    assert huge.status_code == 413 and _error(huge)["code"] == "payload_too_large"
    assert not Role.objects.filter(tenant=tenant_a).exists()


def test_unknown_role_and_permission_are_400_with_nothing_written(api, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    role = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/roles",
        {"name": "weird", "title": "W", "permissions": ["caches.explode"]},
        format="json",
    )
    assert role.status_code == 400 and _error(role)["code"] == "unknown_permission"
    policy = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy").json()
    response = api.put(
        f"/api/v1/tenants/{tenant_a.slug}/iam-policy",
        {
            "etag": policy["etag"],
            "bindings": [
                *[{"role": b["role"], "principal": b["principal"]} for b in policy["bindings"]],
                {"role": "tenant.wizard", "principal": str(admin_a.pk)},
            ],
        },
        format="json",
    )
    assert response.status_code == 400 and _error(response)["code"] == "unknown_role"
    assert RoleBinding.objects.filter(tenant=tenant_a).count() == 1


def test_last_admin_removal_is_409(api, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    policy = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy").json()
    response = api.put(
        f"/api/v1/tenants/{tenant_a.slug}/iam-policy",
        {"etag": policy["etag"], "bindings": []},
        format="json",
    )
    assert response.status_code == 409 and _error(response)["code"] == "last_tenant_admin"


def test_key_list_has_a_query_budget(api, tenant_a, admin_a) -> None:
    for n in range(30):
        keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name=f"k{n}")
    api.force_login(admin_a)
    with CaptureQueriesContext(connection) as queries:
        response = api.get(f"/api/v1/tenants/{tenant_a.slug}/keys")
    assert response.status_code == 200 and len(response.json()["results"]) == 30
    assert len(queries) <= 8, [q["sql"] for q in queries]


def test_service_account_key_cannot_be_created_for_another_tenants_account(
    api, tenant_a, tenant_b, admin_b
) -> None:
    foreign = ServiceAccountFactory(tenant=tenant_a)
    api.force_login(admin_b)
    response = api.post(
        f"/api/v1/tenants/{tenant_b.slug}/keys",
        {"name": "steal", "principal": str(foreign.pk)},
        format="json",
    )
    assert response.status_code == 400 and _error(response)["code"] == "unknown_principal"
    assert not ApiKey.objects.all_tenants().exists()
