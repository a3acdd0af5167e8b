"""Hourly signed digests, their chain, the rewrite they expose, and signing-key rotation."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit.bundle import digest_hash
from audit.chain import GENESIS_HASH, event_hash
from audit.errors import SigningKeyConflict, SigningKeyMissing
from audit.models import AuditChainHead, AuditDigest, AuditEvent, AuditSigningKey
from audit.selectors import (
    audit_chain_verify,
    audit_digest_chain_verify,
    audit_digest_record,
    audit_event_record,
    audit_signing_key_list,
    tenant_chain_name,
)
from audit.services.digests import (
    audit_digest_create,
    audit_digest_hour,
    audit_digest_schedule,
)
from audit.services.signing_keys import audit_signing_key_register, signing_key_active
from audit.tasks import audit_digest_create_batch_task, audit_digest_schedule_task
from audit.verify import digest_problem, load_keys, verify_bundle
from tests.audit.helpers import (
    KEY_1,
    KEY_2,
    KID_1,
    KID_2,
    bundle_path,
    chmod_mode,
    keyset_file,
    pem_file,
    record_events,
    run_export,
)

HOUR = timedelta(hours=1)


def _digests(chain: str) -> list[AuditDigest]:
    return list(AuditDigest.objects.filter(chain=chain).order_by("number"))


@pytest.mark.django_db
def test_each_digest_signs_the_head_and_links_to_the_previous_one(tenant_a, admin_a) -> None:
    chain = tenant_chain_name(tenant_a)
    now = timezone.now()
    record_events(tenant_a, admin_a, 3)
    first = audit_digest_create(chain=chain, hour=now)
    record_events(tenant_a, admin_a, 2)
    second = audit_digest_create(chain=chain, hour=now + HOUR)
    assert (first.number, first.head_seq, first.prev_digest_hash) == (1, 3, GENESIS_HASH)
    assert (second.number, second.head_seq) == (2, 5)
    assert second.prev_digest_hash == first.digest_hash
    head = AuditChainHead.objects.get(chain=chain)
    assert second.head_hash == head.hash
    for digest in (first, second):
        record = audit_digest_record(digest)
        assert digest_hash(record) == digest.digest_hash
        assert record["hour"] == audit_digest_hour(digest.hour).isoformat()
    assert audit_digest_chain_verify(chain) == (2, [])


@pytest.mark.django_db
def test_a_digest_is_made_once_per_hour_and_only_when_the_chain_moved(tenant_a, admin_a) -> None:
    chain = tenant_chain_name(tenant_a)
    now = timezone.now()
    assert audit_digest_create(chain=chain, hour=now) is None  # no events yet
    record_events(tenant_a, admin_a, 2)
    assert audit_digest_create(chain=chain, hour=now) is not None
    record_events(tenant_a, admin_a, 1)
    assert audit_digest_create(chain=chain, hour=now) is None  # this hour is signed
    assert audit_digest_create(chain=chain, hour=now - HOUR) is None  # never backwards
    assert audit_digest_create(chain=chain, hour=now + HOUR).head_seq == 3
    assert audit_digest_create(chain=chain, hour=now + 2 * HOUR) is None  # did not move
    assert [d.number for d in _digests(chain)] == [1, 2]


@pytest.mark.django_db
def test_the_digest_tasks_fan_out_per_batch_and_running_twice_is_a_no_op(
    tenant_a, tenant_b, admin_a, admin_b, celery_eager, monkeypatch
) -> None:
    from audit.services import digests as digest_services

    record_events(tenant_a, admin_a, 2)
    record_events(tenant_b, admin_b, 2)
    record_events(None, admin_a, 1, prefix="platform.thing")
    monkeypatch.setattr(digest_services, "DIGEST_BATCH", 2)  # a tunable, not our logic
    assert audit_digest_schedule() == 2  # three moved chains, batches of two
    assert AuditDigest.objects.count() == 3
    hour = audit_digest_hour(timezone.now()).isoformat()
    chains = [tenant_chain_name(tenant_a), tenant_chain_name(tenant_b), "platform"]
    audit_digest_create_batch_task(hour, chains)  # the same batch, delivered again
    audit_digest_create_batch_task(hour, chains)
    audit_digest_schedule_task()  # nothing moved since: nothing to fan out
    assert AuditDigest.objects.count() == 3
    assert audit_digest_schedule() == 0


@pytest.mark.django_db
def test_digests_are_append_only(tenant_a, admin_a) -> None:
    record_events(tenant_a, admin_a, 1)
    digest = audit_digest_create(chain=tenant_chain_name(tenant_a), hour=timezone.now())
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditDigest.objects.filter(pk=digest.pk).update(head_seq=0)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditDigest.objects.filter(pk=digest.pk).delete()


def _rewrite_history(chain: str, seq: int) -> None:
    """A DBA with trigger rights forges event ``seq`` and re-hashes everything after it,
    head included, so the chain verifies again on its own."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_append_only")
    prev_hash = AuditEvent.objects.get(chain=chain, seq=seq - 1).hash if seq > 1 else GENESIS_HASH
    for event in AuditEvent.objects.filter(chain=chain, seq__gte=seq).order_by("seq"):
        record = audit_event_record(event)
        if event.seq == seq:
            record["target_id"] = event.target_id = "forged"
        record["prev_hash"] = event.prev_hash = prev_hash
        event.hash = prev_hash = event_hash(record)
        event.save(update_fields=["target_id", "prev_hash", "hash"])
    AuditChainHead.objects.filter(chain=chain).update(hash=prev_hash)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_append_only")


@pytest.mark.django_db
def test_a_database_rewrite_after_a_digest_is_exposed_by_verify_digests_and_by_exports(
    tenant_a, admin_a, tmp_path, capsys
) -> None:
    chain = tenant_chain_name(tenant_a)
    record_events(tenant_a, admin_a, 8)
    audit_digest_create(chain=chain, hour=timezone.now())
    call_command("audit", "verify-digests", "--tenant", tenant_a.slug)
    assert "OK" in capsys.readouterr().out

    _rewrite_history(chain, 4)
    assert audit_chain_verify(chain) == (8, None)  # the chain alone looks fine
    with pytest.raises(CommandError):
        call_command("audit", "verify-digests", "--tenant", tenant_a.slug)
    out = capsys.readouterr().out
    assert "BROKEN" in out and "digest #1" in out and "rewritten after this digest" in out

    export = run_export(tenant=tenant_a)  # faithfully exports the rewritten chain
    assert [d["number"] for d in export.manifest["digests"]] == [1]
    report = verify_bundle(bundle_path(export), load_keys(str(keyset_file(tmp_path / "k.json"))))
    assert [(f.kind, f.seq) for f in report.findings] == [("digest", 8)]
    assert "rewritten after that digest" in report.findings[0].message


@pytest.mark.django_db
def test_a_forged_or_unlinked_digest_is_reported(tenant_a, admin_a) -> None:
    chain = tenant_chain_name(tenant_a)
    record_events(tenant_a, admin_a, 2)
    digest = audit_digest_create(chain=chain, hour=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE audit_auditdigest DISABLE TRIGGER audit_digest_append_only")
    AuditDigest.objects.filter(pk=digest.pk).update(head_seq=1)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_auditdigest ENABLE TRIGGER audit_digest_append_only")
    checked, problems = audit_digest_chain_verify(chain)
    assert checked == 1 and any("modified" in p for p in problems)


# --- Signing keys ------------------------------------------------------------------------


@pytest.mark.django_db
def test_rotation_keeps_old_exports_and_digests_verifiable(
    tenant_a, admin_a, settings, tmp_path, api
) -> None:
    chain = tenant_chain_name(tenant_a)
    record_events(tenant_a, admin_a, 4)
    old_digest = audit_digest_create(chain=chain, hour=timezone.now())
    old = run_export(tenant=tenant_a)
    settings.CACHEPLANE_AUDIT_SIGNING_KEY, settings.CACHEPLANE_AUDIT_SIGNING_KEY_ID = KEY_2, KID_2
    record_events(tenant_a, admin_a, 2)
    audit_digest_create(chain=chain, hour=timezone.now() + HOUR)
    new = run_export(tenant=tenant_a)
    assert old.manifest["signing_key"]["kid"] == KID_1
    assert new.manifest["signing_key"]["kid"] == KID_2
    assert old_digest.key_id == KID_1

    keys = {k.kid: k for k in AuditSigningKey.objects.all()}
    assert keys[KID_1].retired_at is not None and keys[KID_2].retired_at is None
    rotation = AuditEvent.objects.filter(action="audit.signing_key.register").order_by("seq")
    assert [e.target_id for e in rotation] == [KID_1, KID_2]
    assert rotation.last().details["retired"] == [KID_1]

    published = api.get("/api/v1/audit/signing-keys")  # no credentials
    assert published.status_code == 200
    body = published.json()
    assert [(k["kid"], k["active"]) for k in body["keys"]] == [(KID_1, False), (KID_2, True)]
    key_set = tmp_path / "published.json"
    key_set.write_text(json.dumps(body))
    for export in (old, new):
        assert verify_bundle(bundle_path(export), load_keys(str(key_set))).intact
    assert audit_digest_chain_verify(chain) == (2, [])
    only_new = load_keys(str(pem_file(tmp_path / "new.pem", KEY_2)))
    assert verify_bundle(bundle_path(new), only_new).intact
    from audit.errors import PublicKeyMismatch

    with pytest.raises(PublicKeyMismatch):
        verify_bundle(bundle_path(old), only_new)
    assert digest_problem(audit_digest_record(old_digest), only_new) is not None


@pytest.mark.django_db
def test_a_reused_key_id_with_another_key_is_refused(settings) -> None:
    audit_signing_key_register()
    settings.CACHEPLANE_AUDIT_SIGNING_KEY = KEY_2  # same id, different key
    with pytest.raises(SigningKeyConflict):
        audit_signing_key_register()
    assert AuditSigningKey.objects.get().fingerprint == signing_key_active_fingerprint(KEY_1)


def signing_key_active_fingerprint(raw: str) -> str:
    from audit.signing import private_key_load, public_key_fingerprint

    return public_key_fingerprint(private_key_load(raw).public_key())


@pytest.mark.django_db
def test_development_generates_one_private_key_file_and_production_refuses(
    settings, tmp_path, caplog
) -> None:
    settings.CACHEPLANE_AUDIT_SIGNING_KEY = settings.CACHEPLANE_AUDIT_SIGNING_KEY_ID = ""
    settings.CACHEPLANE_DATA_DIR = tmp_path / "data"
    key_file = tmp_path / "data" / "audit-signing-key.pem"
    assert audit_signing_key_list() == [] and not key_file.exists()  # reads never create it
    first = signing_key_active()
    assert chmod_mode(key_file) == 0o600
    assert first.kid.startswith("dev-")
    settings.CACHEPLANE_DATA_DIR = tmp_path / "data" / "."  # new cache entry, same file
    assert signing_key_active().fingerprint == first.fingerprint
    pem = key_file.read_text()
    assert all(pem.strip() not in record.getMessage() for record in caplog.records)
    settings.PRODUCTION = True
    settings.CACHEPLANE_DATA_DIR = tmp_path / "elsewhere"
    with pytest.raises(SigningKeyMissing) as raised:
        signing_key_active()
    assert raised.value.code == "signing_key_missing"
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.django_db
def test_an_export_without_a_usable_key_fails_with_its_code(settings, tenant_a, admin_a) -> None:
    record_events(tenant_a, admin_a, 1)
    settings.CACHEPLANE_AUDIT_SIGNING_KEY = settings.CACHEPLANE_AUDIT_SIGNING_KEY_ID = ""
    settings.PRODUCTION = True
    export = run_export(tenant=tenant_a)
    assert (export.status, export.error_code) == ("failed", "signing_key_missing")
    assert not export.file_name
    assert AuditEvent.objects.filter(action="audit.export.failed").exists()


@pytest.mark.django_db
def test_the_command_line_digest_and_key_listing(tenant_a, admin_a, tmp_path, capsys) -> None:
    audit_signing_key_register()  # its audit event is the platform chain's first
    record_events(tenant_a, admin_a, 2)
    call_command("audit", "digest")
    assert "2 digest(s) made" in capsys.readouterr().out
    call_command("audit", "digest")
    assert "0 digest(s) made" in capsys.readouterr().out
    call_command("audit", "signing-keys", "--output", str(tmp_path / "keys.json"))
    keys = json.loads((tmp_path / "keys.json").read_text())["keys"]
    assert [k["kid"] for k in keys] == [KID_1]
    call_command("audit", "verify-digests")
    assert "All 2 digest chain(s) intact." in capsys.readouterr().out
