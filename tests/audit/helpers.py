"""Helpers shared by the audit export tests (events, exports, key files)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from audit.signing import public_key_load
from tests.factories import actor_for

# Fixed test keys (base64 of 32 raw bytes): deterministic, never used outside tests.
KEY_1 = base64.b64encode(bytes(range(32))).decode()
KEY_2 = base64.b64encode(bytes(range(100, 132))).decode()
KID_1, KID_2 = "test-key-1", "test-key-2"


def record_events(tenant, principal, count: int, *, prefix: str = "tests.thing") -> list:
    """Append ``count`` varied events to the tenant's chain (the platform chain for None)."""
    from audit.services import audit_record
    from audit.snapshot import diff, values_snapshot
    from tenants.actor import Actor

    actors = [
        actor_for(principal),
        Actor.system("beat"),
        Actor(
            principal=principal,
            auth_method="api_key",
            key_id="k-123",
            source_ip="10.0.0.7",
            user_agent="=cmd|' /C calc'!A0",
        ),
        Actor(principal=None, auth_method="anonymous", source_ip="203.0.113.9", user_agent=""),
    ]
    verbs = ["create", "get", "update", "delete", "rotate", "poke"]
    outcomes = ["success", "success", "denied", "failed"]
    events = []
    for n in range(count):
        events.append(
            audit_record(
                actor=actors[n % len(actors)],
                action=f"{prefix}.{verbs[n % len(verbs)]}",
                tenant=tenant,
                outcome=outcomes[n % len(outcomes)],
                target_type="thing" if n % 3 else "",
                target_id=f"t-{n}" if n % 3 else "",
                changes=(
                    diff(values_snapshot({"size": n}), values_snapshot({"size": n + 1}))
                    if n % 2
                    else None
                ),
                details={"n": n, "note": 'héllo, "quoted"\nline', "nested": {"ok": n % 2 == 0}},
            )
        )
    return events


def run_export(*, tenant=None, by=None, fmt: str = "jsonl", filter_tenant=None, **filters):
    """Create an export (not enqueued) and produce it here; return the finished row."""
    from audit.services.exports import ExportRequest, audit_export_create, audit_export_run
    from tenants.actor import Actor

    export = audit_export_create(
        tenant=tenant,
        actor=by or Actor.cli(),
        request=ExportRequest(format=fmt, **filters),
        filter_tenant=filter_tenant,
        enqueue=False,
    )
    return audit_export_run(export=export)


def bundle_path(export) -> Path:
    from audit.selectors import export_dir

    return export_dir() / export.file_name


def keyset_file(path: Path, keys: dict[str, str] | None = None) -> Path:
    """Write the published key set (what GET /api/v1/audit/signing-keys returns)."""
    from audit.selectors import audit_signing_key_list

    if keys is None:
        document: dict[str, Any] = {
            "keys": [{"kid": k.kid, "public_key": k.public_key} for k in audit_signing_key_list()]
        }
    else:
        document = keys
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def pem_file(path: Path, private_b64: str) -> Path:
    """The PEM public key of a test private key."""
    from audit.signing import private_key_load, public_key_pem

    path.write_text(public_key_pem(private_key_load(private_b64).public_key()))
    assert public_key_load(path.read_text())
    return path


def chmod_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777
