"""The audit REST API: exports (tenant and platform), downloads, event search, keys."""

from __future__ import annotations

import io
import zipfile

import pytest

from audit.models import AuditEvent, AuditExport
from audit.selectors import export_dir
from audit.verify import load_keys, verify_bundle
from tenants.services import keys as key_services
from tests.audit.helpers import keyset_file, record_events
from tests.factories import actor_for

T = "/api/v1/tenants/{slug}/audit"
P = "/api/v1/platform/audit"


def _exports_url(tenant) -> str:
    return T.format(slug=tenant.slug) + "/exports"


@pytest.mark.django_db
def test_an_auditor_exports_downloads_and_verifies_the_tenant_log(
    api, tenant_a, auditor_a, admin_a, tmp_path, django_capture_on_commit_callbacks, celery_eager
) -> None:
    record_events(tenant_a, admin_a, 15)
    api.force_login(auditor_a)
    with django_capture_on_commit_callbacks(execute=True):
        created = api.post(
            _exports_url(tenant_a), {"format": "ocsf", "outcome": "denied"}, format="json"
        )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["status"], body["scope"], body["tenant"]) == ("pending", "tenant", tenant_a.slug)
    assert body["filters"]["outcome"] == "denied" and body["requested_by"] == "audra"
    create_event = AuditEvent.objects.get(action="audit.export.create", target_id=body["id"])
    assert create_event.actor_name == "audra" and create_event.tenant_id == tenant_a.pk

    detail = api.get(f"{_exports_url(tenant_a)}/{body['id']}").json()
    assert detail["status"] == "succeeded" and detail["progress"] == 1.0
    assert detail["manifest"]["signing_key"]["kid"] == "test-key-1"
    assert detail["download_url"] == f"{_exports_url(tenant_a)}/{body['id']}/download"

    download = api.get(detail["download_url"])
    assert download.status_code == 200
    assert download["Content-Type"] == "application/zip"
    assert download["Cache-Control"] == "no-store"
    data = b"".join(download.streaming_content)
    assert zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert download["X-Content-SHA256"] == detail["file_sha256"]
    saved = tmp_path / "export.zip"
    saved.write_bytes(data)
    assert verify_bundle(saved, load_keys(str(keyset_file(tmp_path / "k.json")))).intact
    downloaded = AuditEvent.objects.get(action="audit.export.download", target_id=body["id"])
    assert downloaded.actor_name == "audra" and downloaded.details["file_sha256"]

    listed = api.get(_exports_url(tenant_a)).json()
    assert [e["id"] for e in listed["results"]] == [body["id"]]


@pytest.mark.django_db
def test_only_auditors_may_export_or_search(api, tenant_a, viewer_a) -> None:
    api.force_login(viewer_a)  # holds iam.get, not audit.export
    url = _exports_url(tenant_a)
    for response in (
        api.post(url, {"format": "jsonl"}, format="json"),
        api.get(url),
        api.get(T.format(slug=tenant_a.slug) + "/events"),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "permission_denied"
    assert not AuditExport.objects.exists()
    denied = AuditEvent.objects.filter(outcome="denied", actor_name="vic")
    assert {e.action for e in denied} == {
        "audit.export.create",
        "audit.export.list",
        "audit.event.list",
    }


@pytest.mark.django_db
def test_another_tenant_gets_404_for_an_export_and_its_download(
    api, tenant_a, tenant_b, auditor_a, admin_b, admin_a
) -> None:
    api.force_login(auditor_a)
    export_id = api.post(_exports_url(tenant_a), {"format": "jsonl"}, format="json").json()["id"]
    api.force_login(admin_b)
    for path in (f"/{export_id}", f"/{export_id}/download"):
        assert api.get(_exports_url(tenant_a) + path).status_code == 404
        # Under its own tenant, B does not find A's export either.
        response = api.get(_exports_url(tenant_b) + path)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"format": "xml"}, "unknown_export_format"),
        (
            {"format": "jsonl", "since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
            "invalid_time_range",
        ),
        ({"format": "jsonl", "outcome": "sometimes"}, "invalid_export_filter"),
        ({"format": "jsonl", "since": "yesterday"}, "invalid_input"),
        ({}, "invalid_input"),
    ],
)
def test_bad_export_input_is_a_400_with_its_code_and_writes_nothing(
    api, tenant_a, auditor_a, payload, code
) -> None:
    api.force_login(auditor_a)
    before = AuditEvent.objects.count()
    response = api.post(_exports_url(tenant_a), payload, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert not AuditExport.objects.exists()
    assert AuditEvent.objects.count() == before


@pytest.mark.django_db
def test_a_download_before_success_or_after_removal_is_refused(api, tenant_a, auditor_a) -> None:
    from audit.services.exports import audit_export_run

    api.force_login(auditor_a)
    export_id = api.post(_exports_url(tenant_a), {"format": "csv"}, format="json").json()["id"]
    pending = api.get(f"{_exports_url(tenant_a)}/{export_id}/download")
    assert pending.status_code == 409 and pending.json()["error"]["code"] == "export_not_ready"
    export = audit_export_run(export=AuditExport.objects.get(pk=export_id))
    (export_dir() / export.file_name).unlink()
    gone = api.get(f"{_exports_url(tenant_a)}/{export_id}/download")
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "export_file_missing"
    assert not AuditEvent.objects.filter(action="audit.export.download").exists()


@pytest.mark.django_db
def test_an_idempotency_key_replay_returns_the_same_export(api, tenant_a, auditor_a) -> None:
    api.force_login(auditor_a)
    headers = {"HTTP_IDEMPOTENCY_KEY": "export-2026-11-30"}
    first = api.post(_exports_url(tenant_a), {"format": "csv"}, format="json", **headers)
    again = api.post(_exports_url(tenant_a), {"format": "csv"}, format="json", **headers)
    assert first.json()["id"] == again.json()["id"]
    other = api.post(_exports_url(tenant_a), {"format": "ocsf"}, format="json", **headers)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert AuditExport.objects.count() == 1


@pytest.mark.django_db
def test_event_search_filters_pages_and_stays_in_the_tenant(
    api, tenant_a, tenant_b, auditor_a, admin_a, admin_b, django_assert_max_num_queries
) -> None:
    record_events(tenant_a, admin_a, 30)
    record_events(tenant_b, admin_b, 30)
    api.force_login(auditor_a)
    url = T.format(slug=tenant_a.slug) + "/events"
    with django_assert_max_num_queries(5):
        page = api.get(url, {"page_size": 10}).json()
    assert [e["seq"] for e in page["results"]] == list(range(30, 20, -1))
    assert all(e["tenant_id"] == str(tenant_a.pk) for e in page["results"])
    assert api.get(page["next"]).json()["results"][0]["seq"] == 20
    denied = api.get(url, {"outcome": "denied", "action": "tests.thing.*"}).json()["results"]
    assert denied and all(e["outcome"] == "denied" for e in denied)
    by_actor = api.get(url, {"actor": "alice"}).json()["results"]
    assert by_actor and all(e["actor_name"] == "alice" for e in by_actor)
    first = AuditEvent.objects.get(tenant=tenant_a, seq=5).occurred_at.isoformat()
    last = AuditEvent.objects.get(tenant=tenant_a, seq=9).occurred_at.isoformat()
    ranged = api.get(url, {"since": first, "until": last}).json()["results"]
    assert [e["seq"] for e in ranged] == [8, 7, 6, 5]
    bad = api.get(url, {"since": last, "until": first})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_time_range"
    odd = api.get(url, {"outcome": "sometimes"})
    assert odd.status_code == 400 and odd.json()["error"]["code"] == "invalid_export_filter"


@pytest.mark.django_db
def test_listing_exports_costs_a_fixed_number_of_queries(
    api, tenant_a, auditor_a, django_assert_max_num_queries
) -> None:
    api.force_login(auditor_a)
    for _ in range(3):
        api.post(_exports_url(tenant_a), {"format": "jsonl"}, format="json")
    with django_assert_max_num_queries(5):
        few = api.get(_exports_url(tenant_a))
    for _ in range(12):
        api.post(_exports_url(tenant_a), {"format": "csv"}, format="json")
    with django_assert_max_num_queries(5):
        many = api.get(_exports_url(tenant_a))
    assert len(few.json()["results"]) == 3 and len(many.json()["results"]) == 15


@pytest.mark.django_db
def test_platform_auditors_export_every_chain_or_one_tenant(
    api, tenant_a, tenant_b, admin_a, platform_auditor
) -> None:
    record_events(tenant_a, admin_a, 2)
    api.force_login(platform_auditor)
    everything = api.post(f"{P}/exports", {"format": "jsonl"}, format="json")
    assert everything.status_code == 201 and everything.json()["scope"] == "platform"
    one = api.post(f"{P}/exports", {"format": "csv", "tenant": tenant_b.slug}, format="json")
    assert one.status_code == 201 and one.json()["tenant"] == tenant_b.slug
    unknown = api.post(f"{P}/exports", {"format": "csv", "tenant": "no-such"}, format="json")
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "unknown_tenant"
    assert AuditExport.objects.count() == 2
    assert api.get(f"{P}/exports").json()["results"][0]["id"] == one.json()["id"]
    assert api.get(f"{P}/exports/{one.json()['id']}").status_code == 200
    created = AuditEvent.objects.filter(action="audit.export.create", chain="platform")
    assert created.count() == 2
    # A platform export is not reachable through a tenant route, even by a platform role.
    assert api.get(f"{_exports_url(tenant_b)}/{one.json()['id']}").status_code == 404


@pytest.mark.django_db
def test_platform_routes_refuse_tenant_admins_and_api_keys(api, tenant_a, admin_a) -> None:
    api.force_login(admin_a)
    assert api.post(f"{P}/exports", {"format": "jsonl"}, format="json").status_code == 403
    assert api.get(f"{P}/exports").status_code == 403
    api.logout()
    issued = key_services.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="k")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")
    assert api.get(f"{P}/exports").status_code == 403
    assert not AuditExport.objects.exists()


@pytest.mark.django_db
def test_an_api_key_with_audit_export_can_export_its_tenant(api, tenant_a, admin_a) -> None:
    issued = key_services.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="k")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")
    response = api.post(_exports_url(tenant_a), {"format": "jsonl"}, format="json")
    assert response.status_code == 201
    event = AuditEvent.objects.get(action="audit.export.create")
    assert event.auth_method == "api_key" and event.key_id == str(issued.key.pk)


@pytest.mark.django_db
def test_signing_keys_are_public(api) -> None:
    response = api.get("/api/v1/audit/signing-keys")
    assert response.status_code == 200
    (key,) = response.json()["keys"]
    assert key["kid"] == "test-key-1" and key["active"] is True
    assert key["public_key"].startswith("-----BEGIN PUBLIC KEY-----")
    assert len(key["public_key_sha256"]) == 64
