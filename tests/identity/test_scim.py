"""SCIM 2.0 provisioning over real HTTP: an IdP creates, groups, deactivates and deletes
people, and their access follows (bindings through the group mapping, sessions, keys)."""

from __future__ import annotations

import httpx
import pytest
from django.test import Client

from audit.models import AuditEvent
from identity.models import ScimGroup
from identity.services import mappings, scim
from tenants.models import Principal, RoleBinding
from tenants.services import keys
from tests.factories import HumanFactory, TenantFactory, actor_for, bind

SCIM = "application/scim+json"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


@pytest.fixture
def world():
    """acme-legal with its owner; group ml-legal-devs → tenant.developer; a SCIM token."""
    ops = HumanFactory(username="ops")
    bind(ops, "platform.admin", None)
    tenant = TenantFactory(slug="acme-legal")
    bind(HumanFactory(username="owner"), "tenant.admin", tenant)
    mappings.group_mapping_create(
        actor=actor_for(ops), tenant=tenant, group="ml-legal-devs", role="tenant.developer"
    )
    issued = scim.scim_token_create(actor=actor_for(ops), name="okta")
    return {"ops": ops, "tenant": tenant, "token": issued.plaintext, "token_row": issued.token}


def _idp(base: str, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{base}/scim/v2",
        headers={"Authorization": f"Bearer {token}", "Content-Type": SCIM},
        timeout=20,
    )


def _status_with_key(token: str) -> int:
    return (
        Client().get("/api/v1/tenants/acme-legal", HTTP_AUTHORIZATION=f"Bearer {token}").status_code
    )


@pytest.mark.django_db(transaction=True)
def test_an_idp_provisions_groups_deactivates_and_deletes_a_person_and_access_follows(
    live_server_url, world
) -> None:
    idp = _idp(live_server_url, world["token"])
    created = idp.post(
        "/Users",
        json={
            "schemas": [USER_SCHEMA],
            "userName": "erin",
            "name": {"givenName": "Erin", "familyName": "Ames"},
            "emails": [{"value": "erin@example.com", "primary": True}],
            "active": True,
        },
    )
    assert created.status_code == 201, created.text
    erin_id = created.json()["id"]
    erin = Principal.objects.get(pk=erin_id)
    assert (erin.username, erin.email, erin.is_active) == ("erin", "erin@example.com", True)
    assert not RoleBinding.objects.filter(principal=erin).exists()  # no group yet
    found = idp.get("/Users", params={"filter": 'userName eq "erin"'}).json()
    assert [u["id"] for u in found["Resources"]] == [erin_id]

    # Group membership drives the mapping: erin becomes a developer on acme-legal.
    group = idp.post(
        "/Groups",
        json={
            "schemas": [GROUP_SCHEMA],
            "displayName": "ml-legal-devs",
            "members": [{"value": erin_id}],
        },
    )
    assert group.status_code == 201, group.text
    group_id = group.json()["id"]
    assert RoleBinding.objects.filter(
        principal=erin, tenant=world["tenant"], role__name="tenant.developer"
    ).exists()
    grant = AuditEvent.objects.filter(action="tenants.policy.set").latest("seq")
    assert grant.auth_method == "scim" and grant.key_id == str(world["token_row"].pk)
    assert grant.details["reason"] == "idp_group_mapping"

    key = keys.api_key_create(actor=actor_for(erin), tenant=world["tenant"], name="mine").plaintext
    assert _status_with_key(key) == 200
    browser = Client()
    browser.force_login(erin)
    assert browser.get("/api/v1/tenants/acme-legal").status_code == 200

    # Removing the membership takes the mapped binding away.
    removed = idp.patch(
        f"/Groups/{group_id}",
        json={
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "remove", "path": f'members[value eq "{erin_id}"]'}],
        },
    )
    assert removed.status_code == 200, removed.text
    assert removed.json()["members"] == []
    assert not RoleBinding.objects.filter(principal=erin).exists()
    assert browser.get("/api/v1/tenants/acme-legal").status_code == 404

    # Added back, then deactivated: sessions and own keys stop at once.
    added = idp.patch(
        f"/Groups/{group_id}",
        json={
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "add", "path": "members", "value": [{"value": erin_id}]}],
        },
    )
    assert added.status_code == 200 and RoleBinding.objects.filter(principal=erin).exists()
    assert browser.get("/api/v1/tenants/acme-legal").status_code == 200
    off = idp.patch(
        f"/Users/{erin_id}",
        json={
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "replace", "value": {"active": False}}],
        },
    )
    assert off.status_code == 200 and off.json()["active"] is False, off.text
    assert browser.get("/api/v1/tenants/acme-legal").status_code in (401, 403)
    assert _status_with_key(key) == 401
    disable = AuditEvent.objects.get(action="identity.principal.disable")
    assert disable.auth_method == "scim" and disable.actor_id is None

    # Deleted: gone from SCIM, bindings removed, the row and its history kept.
    assert idp.delete(f"/Users/{erin_id}").status_code == 204
    assert idp.get(f"/Users/{erin_id}").status_code == 404
    erin.refresh_from_db()
    assert erin.removed_at is not None and not erin.is_active
    assert not RoleBinding.objects.filter(principal=erin).exists()
    assert not ScimGroup.objects.get(pk=group_id).members.exists()
    assert AuditEvent.objects.filter(action="identity.principal.remove", target_id=erin_id).exists()
    assert idp.get("/Users", params={"filter": 'userName eq "erin"'}).json()["totalResults"] == 0

    # Deleting the group is audited as the IdP's.
    assert idp.delete(f"/Groups/{group_id}").status_code == 204
    assert AuditEvent.objects.get(action="identity.scim.group.delete").auth_method == "scim"


@pytest.mark.django_db(transaction=True)
def test_scim_refuses_a_wrong_or_revoked_token_and_a_console_session(
    live_server_url, world
) -> None:
    assert _idp(live_server_url, "cpscim_wrong").get("/Users").status_code == 401
    assert httpx.get(f"{live_server_url}/scim/v2/Users").status_code == 401
    failure = AuditEvent.objects.filter(action="identity.scim.authenticate").latest("seq")
    assert failure.outcome == "failed" and failure.details["reason"] == "invalid_token"

    scim.scim_token_revoke(actor=actor_for(world["ops"]), token_id=str(world["token_row"].pk))
    assert _idp(live_server_url, world["token"]).get("/Users").status_code == 401

    admin = Client()
    admin.force_login(world["ops"])  # a platform admin's session is not a SCIM credential
    assert admin.get("/scim/v2/Users").status_code == 401


@pytest.mark.django_db
def test_scim_tokens_are_made_shown_once_stored_hashed_and_revoked_over_rest(api, world) -> None:
    api.force_login(world["ops"])
    made = api.post("/api/v1/platform/scim-tokens", {"name": "entra"}, format="json")
    assert made.status_code == 201
    secret = made.json()["token"]
    from identity.models import ScimToken

    row = ScimToken.objects.get(pk=made.json()["id"])
    assert secret not in (row.digest, row.prefix) and len(row.digest) == 64
    listed = api.get("/api/v1/platform/scim-tokens").json()["results"]
    assert all("token" not in t for t in listed)
    assert AuditEvent.objects.filter(
        action="identity.scim_token.create", target_id=str(row.pk)
    ).exists()
    assert secret not in str(list(AuditEvent.objects.values_list("details", flat=True)))
    assert api.delete(f"/api/v1/platform/scim-tokens/{row.pk}").status_code == 204
    assert scim.scim_token_authenticate(secret) is None


@pytest.mark.django_db
def test_bad_scim_input_is_a_scim_error_not_a_500(world) -> None:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    bad = client.post("/scim/v2/Users", '{"userName": 5}', content_type=SCIM)
    assert bad.status_code == 400
    dup = {"schemas": [USER_SCHEMA], "userName": "owner"}
    import json

    assert client.post("/scim/v2/Users", json.dumps(dup), content_type=SCIM).status_code == 409
    ghost = {"schemas": [GROUP_SCHEMA], "displayName": "g", "members": [{"value": "nope"}]}
    assert client.post("/scim/v2/Groups", json.dumps(ghost), content_type=SCIM).status_code == 400
    assert not ScimGroup.objects.exists()
