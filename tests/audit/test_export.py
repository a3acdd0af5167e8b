"""Audit exports: canonical JSONL, CSV and OCSF views, filters, manifest, task, bad input."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.bundle import CSV_COLUMNS, csv_cell
from audit.chain import GENESIS_HASH, event_hash
from audit.errors import (
    IdempotencyKeyReused,
    InvalidExportFilter,
    InvalidTimeRange,
    UnknownExportFormat,
)
from audit.models import AuditEvent, AuditExport
from audit.selectors import audit_event_record, tenant_chain_name
from audit.services.exports import ExportRequest, audit_export_create
from audit.tasks import audit_export_run_task
from audit.verify import verify_bundle
from tests.audit.helpers import bundle_path, keyset_file, record_events, run_export
from tests.factories import actor_for


def _members(export) -> dict[str, bytes]:
    with zipfile.ZipFile(bundle_path(export)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode().splitlines()]


# OCSF 1.3.0, API Activity (class 6003): the attributes the class and the base event
# require, plus the recommended ones we promise (status, type_uid formula checked below).
OCSF_REQUIRED = (
    "activity_id",
    "category_uid",
    "class_uid",
    "type_uid",
    "severity_id",
    "time",
    "metadata",
    "metadata.version",
    "metadata.product",
    "metadata.product.name",
    "metadata.product.vendor_name",
    "actor",
    "actor.user",
    "api",
    "api.operation",
    "src_endpoint",
    "status_id",
)


def _has(event: dict, dotted: str) -> bool:
    value: object = event
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value or value[part] in (None, ""):
            return False
        value = value[part]
    return True


@pytest.mark.django_db
def test_jsonl_export_is_exactly_the_canonical_records_of_the_chain(tenant_a, admin_a) -> None:
    record_events(tenant_a, admin_a, 12)
    export = run_export(tenant=tenant_a, by=actor_for(admin_a))
    assert export.status == "succeeded" and export.records == 12 and export.withheld == 0
    files = _members(export)
    assert set(files) == {"manifest.json", "events.jsonl", "digests.jsonl"}
    lines = _jsonl(files["events.jsonl"])
    expected = [
        audit_event_record(e)
        for e in AuditEvent.objects.filter(chain=tenant_chain_name(tenant_a)).order_by("seq")[:12]
    ]
    assert lines == expected
    assert all(event_hash(line) == line["hash"] for line in lines)
    manifest = json.loads(files["manifest.json"])
    (chain,) = manifest["chains"]
    assert chain == {
        "chain": tenant_chain_name(tenant_a),
        "first_seq": 1,
        "last_seq": 12,
        "first_prev_hash": GENESIS_HASH,
        "last_hash": lines[-1]["hash"],
        "records": 12,
        "withheld": 0,
    }
    assert manifest["count"] == {"records": 12, "withheld": 0, "chains": 1}
    assert manifest["scope"] == {
        "type": "tenant",
        "tenant_id": str(tenant_a.pk),
        "tenant_slug": tenant_a.slug,
    }
    assert manifest["signing_key"]["kid"] == "test-key-1"
    assert {f["name"] for f in manifest["files"]} == {"events.jsonl", "digests.jsonl"}
    assert manifest["requested_by"]["name"] == "alice"


@pytest.mark.django_db
def test_filtered_export_withholds_the_rest_of_the_range_but_keeps_it_contiguous(
    tenant_a, admin_a, tmp_path
) -> None:
    record_events(tenant_a, admin_a, 24)
    export = run_export(tenant=tenant_a, fmt="csv", outcome="denied", action="tests.thing.*")
    entries = _jsonl(_members(export)["events.jsonl"])
    full = [e for e in entries if not e.get("withheld")]
    withheld = [e for e in entries if e.get("withheld")]
    assert [e["seq"] for e in entries] == list(range(entries[0]["seq"], entries[-1]["seq"] + 1))
    assert full and all(e["outcome"] == "denied" for e in full)
    assert entries[0] == full[0] and entries[-1] == full[-1]  # the range ends on selected ones
    assert all(set(e) == {"chain", "seq", "prev_hash", "hash", "withheld"} for e in withheld)
    assert (export.records, export.withheld) == (len(full), len(withheld))
    report = verify_bundle(bundle_path(export), _keys(tmp_path))
    assert report.intact, [str(f) for f in report.findings]


@pytest.mark.django_db
def test_time_range_export_covers_exactly_the_events_in_the_range(tenant_a, admin_a) -> None:
    record_events(tenant_a, admin_a, 10)
    events = list(AuditEvent.objects.filter(tenant=tenant_a).order_by("seq"))
    export = run_export(tenant=tenant_a, since=events[3].occurred_at, until=events[7].occurred_at)
    entries = _jsonl(_members(export)["events.jsonl"])
    assert [e["seq"] for e in entries] == [4, 5, 6, 7]
    assert entries[0]["prev_hash"] == events[2].hash


@pytest.mark.django_db
def test_csv_view_has_one_row_per_selected_event_and_defuses_formulas(tenant_a, admin_a) -> None:
    record_events(tenant_a, admin_a, 8)
    export = run_export(tenant=tenant_a, fmt="csv")
    files = _members(export)
    rows = list(csv.reader(io.StringIO(files["events.csv"].decode(), newline="")))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == 1 + 8
    agents = [row[CSV_COLUMNS.index("user_agent")] for row in rows[1:]]
    assert "'=cmd|' /C calc'!A0" in agents and not any(a.startswith("=") for a in agents)
    by_seq = {int(row[1]): row for row in rows[1:]}
    first = _jsonl(files["events.jsonl"])[0]
    assert by_seq[1][CSV_COLUMNS.index("details")] == csv_cell(first["details"])


@pytest.mark.django_db
def test_ocsf_view_carries_every_field_the_api_activity_class_requires(tenant_a, admin_a) -> None:
    record_events(tenant_a, admin_a, 12)
    export = run_export(tenant=tenant_a, fmt="ocsf")
    files = _members(export)
    events = _jsonl(files["events.ocsf.jsonl"])
    canonical = _jsonl(files["events.jsonl"])
    assert len(events) == 12
    for event, record in zip(events, canonical, strict=True):
        missing = [name for name in OCSF_REQUIRED if not _has(event, name)]
        assert not missing, (missing, event)
        assert event["class_uid"] == 6003 and event["category_uid"] == 6
        assert event["type_uid"] == 6003 * 100 + event["activity_id"]
        assert event["activity_id"] in (0, 1, 2, 3, 4, 99)
        assert event["api"]["operation"] == record["action"]
        assert event["status_id"] == (1 if record["outcome"] == "success" else 2)
        assert event["unmapped"]["hash"] == record["hash"]
        assert isinstance(event["time"], int)
    verbs = {e["api"]["operation"].rsplit(".", 1)[1]: e["activity_id"] for e in events}
    assert verbs["create"] == 1 and verbs["get"] == 2 and verbs["update"] == 3
    assert verbs["delete"] == 4 and verbs["poke"] == 99
    assert json.loads(files["manifest.json"])["ocsf_version"] == "1.3.0"


@pytest.mark.django_db
def test_tenant_export_holds_nothing_of_another_tenant(
    tenant_a, tenant_b, admin_a, admin_b, tmp_path
) -> None:
    record_events(tenant_a, admin_a, 6)
    record_events(tenant_b, admin_b, 6, prefix="secret.bob")
    export = run_export(tenant=tenant_a, fmt="ocsf")
    for name, data in _members(export).items():
        assert str(tenant_b.pk).encode() not in data, name
        assert b"secret.bob" not in data and b'"bob"' not in data, name
    assert verify_bundle(bundle_path(export), _keys(tmp_path)).intact


@pytest.mark.django_db
def test_platform_export_covers_every_chain_or_one_tenant(
    tenant_a, tenant_b, admin_a, admin_b, platform_auditor, tmp_path
) -> None:
    record_events(tenant_a, admin_a, 3)
    record_events(tenant_b, admin_b, 4)
    record_events(None, platform_auditor, 2, prefix="platform.thing")
    everything = run_export(tenant=None, by=actor_for(platform_auditor))
    chains = [c["chain"] for c in everything.manifest["chains"]]
    assert chains == sorted(["platform", tenant_chain_name(tenant_a), tenant_chain_name(tenant_b)])
    only_b = run_export(tenant=None, filter_tenant=tenant_b)
    assert [c["chain"] for c in only_b.manifest["chains"]] == [tenant_chain_name(tenant_b)]
    assert only_b.manifest["scope"]["tenant_slug"] == tenant_b.slug
    for export in (everything, only_b):
        assert verify_bundle(bundle_path(export), _keys(tmp_path)).intact


@pytest.mark.django_db
def test_an_export_selecting_nothing_is_empty_and_intact(tenant_a, admin_a, tmp_path) -> None:
    record_events(tenant_a, admin_a, 3)
    export = run_export(tenant=tenant_a, actor="nobody-by-that-name")
    assert export.status == "succeeded" and export.records == 0
    assert _members(export)["events.jsonl"] == b""
    assert verify_bundle(bundle_path(export), _keys(tmp_path)).intact


@pytest.mark.django_db
def test_creating_an_export_is_audited_in_the_same_transaction(tenant_a, auditor_a) -> None:
    export = audit_export_create(
        tenant=tenant_a,
        actor=actor_for(auditor_a),
        request=ExportRequest(format="csv", action="tenants.*", outcome="denied"),
        enqueue=False,
    )
    event = AuditEvent.objects.get(action="audit.export.create", target_id=str(export.pk))
    assert event.tenant_id == tenant_a.pk and event.actor_name == "audra"
    assert event.details["format"] == "csv"
    assert event.details["filters"]["action"] == "tenants.*"
    assert event.details["filters"]["outcome"] == "denied"
    assert export.status == "pending"


@pytest.mark.django_db
def test_the_export_task_enqueued_after_commit_runs_once_and_a_rerun_is_a_no_op(
    tenant_a, auditor_a, django_capture_on_commit_callbacks, celery_eager
) -> None:
    record_events(tenant_a, auditor_a, 5)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        export = audit_export_create(
            tenant=tenant_a, actor=actor_for(auditor_a), request=ExportRequest(format="jsonl")
        )
    assert len(callbacks) == 1
    export.refresh_from_db()
    assert export.status == "succeeded" and export.attempts == 1
    first = (export.file_sha256, export.finished_at)
    events_before = AuditEvent.objects.count()
    audit_export_run_task(str(export.pk))  # the broker redelivers: nothing happens
    audit_export_run_task(str(export.pk))
    export.refresh_from_db()
    assert (export.file_sha256, export.finished_at, export.attempts) == (*first, 1)
    assert AuditEvent.objects.count() == events_before
    audit_export_run_task("00000000-0000-0000-0000-000000000000")  # gone: no-op
    audit_export_run_task("not-a-uuid")


@pytest.mark.django_db
def test_a_running_export_is_left_alone_unless_its_heartbeat_is_stale(tenant_a, admin_a) -> None:
    from audit.services.exports import EXPORT_LEASE, audit_export_run

    record_events(tenant_a, admin_a, 3)
    export = audit_export_create(
        tenant=tenant_a,
        actor=actor_for(admin_a),
        request=ExportRequest(format="jsonl"),
        enqueue=False,
    )
    AuditExport.objects.filter(pk=export.pk).update(
        status="running", heartbeat_at=timezone.now(), attempts=1
    )
    assert audit_export_run(export=export).status == "running"
    AuditExport.objects.filter(pk=export.pk).update(
        heartbeat_at=timezone.now() - EXPORT_LEASE - timedelta(seconds=1)
    )
    taken_over = audit_export_run(export=export)
    assert taken_over.status == "succeeded" and taken_over.attempts == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("request_kwargs", "error"),
    [
        ({"format": "xml"}, UnknownExportFormat),
        ({"format": "jsonl", "since": "later", "until": "earlier"}, InvalidTimeRange),
        ({"format": "jsonl", "since": "same", "until": "same"}, InvalidTimeRange),
        ({"format": "jsonl", "since": "naive"}, InvalidTimeRange),
        ({"format": "jsonl", "outcome": "maybe"}, InvalidExportFilter),
        ({"format": "jsonl", "action": "ten*ants"}, InvalidExportFilter),
        ({"format": "jsonl", "action": "*"}, InvalidExportFilter),
    ],
)
def test_bad_export_requests_fail_with_their_code_and_write_nothing(
    tenant_a, auditor_a, request_kwargs, error
) -> None:
    now = timezone.now()
    times = {
        "later": now,
        "earlier": now - timedelta(hours=1),
        "same": now,
        "naive": now.replace(tzinfo=None),
    }
    kwargs = {
        k: times.get(v, v) if k in ("since", "until") else v for k, v in request_kwargs.items()
    }
    events_before = AuditEvent.objects.count()
    with pytest.raises(error) as raised:
        audit_export_create(
            tenant=tenant_a, actor=actor_for(auditor_a), request=ExportRequest(**kwargs)
        )
    assert raised.value.code == error.code and raised.value.http_status == 400
    assert not AuditExport.objects.exists()
    assert AuditEvent.objects.count() == events_before


@pytest.mark.django_db
def test_an_idempotency_key_replay_returns_the_original_export(tenant_a, auditor_a) -> None:
    def create(**kwargs):
        return audit_export_create(
            tenant=tenant_a,
            actor=actor_for(auditor_a),
            idempotency_key="k-1",
            enqueue=False,
            request=ExportRequest(**{"format": "csv", **kwargs}),
        )

    first = create()
    assert create().pk == first.pk
    assert AuditExport.objects.count() == 1
    with pytest.raises(IdempotencyKeyReused):
        create(format="ocsf")
    assert AuditEvent.objects.filter(action="audit.export.create").count() == 1


@pytest.mark.django_db
def test_export_files_are_private(tenant_a, admin_a) -> None:
    from tests.audit.helpers import chmod_mode

    record_events(tenant_a, admin_a, 2)
    export = run_export(tenant=tenant_a)
    assert chmod_mode(bundle_path(export)) == 0o600
    assert chmod_mode(bundle_path(export).parent) == 0o700
    assert [p.name for p in bundle_path(export).parent.iterdir()] == [export.file_name]


def _keys(tmp_path):
    from audit.verify import load_keys

    return load_keys(str(keyset_file(tmp_path / "keys.json")))


@pytest.mark.django_db
def test_the_export_command_writes_a_verifiable_bundle_with_progress(
    tenant_a, admin_a, tmp_path, capsys
) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from controlplane.cli import main

    record_events(tenant_a, admin_a, 12)
    target = tmp_path / "out.zip"
    call_command(
        "audit",
        "export",
        "--tenant",
        tenant_a.slug,
        "--format",
        "csv",
        "--action",
        "tests.*",
        "--output",
        str(target),
    )
    captured = capsys.readouterr()
    assert "export 100% (12/12" in captured.err and "records" in captured.out
    event = AuditEvent.objects.get(action="audit.export.create")
    assert (event.auth_method, event.actor_name) == ("cli", "cli")
    keys = keyset_file(tmp_path / "keys.json")
    assert main(["audit", "verify", str(target), "--public-key", str(keys)]) == 0
    with pytest.raises(CommandError, match="invalid_time_range"):
        call_command(
            "audit",
            "export",
            "--platform",
            "--since",
            "2026-02-01T00:00:00Z",
            "--until",
            "2026-01-01T00:00:00Z",
        )
    with pytest.raises(CommandError, match="offset"):
        call_command("audit", "export", "--platform", "--since", "2026-02-01T00:00:00")
