"""Audit records as OCSF API Activity events (class 6003), free of Django.

Target: OCSF 1.3.0. API Activity (category 6, Application Activity) requires
``actor``, ``api`` (with ``operation``) and ``src_endpoint`` on top of the base event's
``activity_id``, ``category_uid``, ``class_uid``, ``type_uid`` (= class_uid * 100 +
activity_id), ``severity_id``, ``time`` and ``metadata`` (``version``, ``product``).
The rendering is a pure function of the canonical record, so the offline verifier can
re-render every event and compare it with the exported file.

Fields without an OCSF home (chain, seq, hashes, auth method, before/after) go to
``unmapped``, so a SIEM record can be traced back to its canonical, verifiable record.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from audit.bundle import parse_time

OCSF_VERSION = "1.3.0"
CATEGORY_UID = 6
CATEGORY_NAME = "Application Activity"
CLASS_UID = 6003
CLASS_NAME = "API Activity"
PRODUCT = {"name": "Cacheplane", "vendor_name": "Cacheplane", "version": "0.1.0"}

ACTIVITY_UNKNOWN, ACTIVITY_CREATE, ACTIVITY_READ, ACTIVITY_UPDATE, ACTIVITY_DELETE = 0, 1, 2, 3, 4
ACTIVITY_OTHER = 99
ACTIVITY_NAMES = {0: "Unknown", 1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"}

# The verb is the last segment of an action (`tenants.api_key.create` → `create`).
_VERB_ACTIVITY = {
    "create": ACTIVITY_CREATE,
    "register": ACTIVITY_CREATE,
    "issue": ACTIVITY_CREATE,
    "add": ACTIVITY_CREATE,
    "get": ACTIVITY_READ,
    "list": ACTIVITY_READ,
    "retrieve": ACTIVITY_READ,
    "read": ACTIVITY_READ,
    "download": ACTIVITY_READ,
    "export": ACTIVITY_READ,
    "test_permissions": ACTIVITY_READ,
    "authenticate": ACTIVITY_READ,
    "login": ACTIVITY_READ,
    "update": ACTIVITY_UPDATE,
    "partial_update": ACTIVITY_UPDATE,
    "replace": ACTIVITY_UPDATE,
    "set": ACTIVITY_UPDATE,
    "rotate": ACTIVITY_UPDATE,
    "rotate_cache_salt": ACTIVITY_UPDATE,
    "suspend": ACTIVITY_UPDATE,
    "resume": ACTIVITY_UPDATE,
    "extend": ACTIVITY_UPDATE,
    "revoke": ACTIVITY_UPDATE,
    "succeeded": ACTIVITY_UPDATE,
    "failed": ACTIVITY_UPDATE,
    "delete": ACTIVITY_DELETE,
    "destroy": ACTIVITY_DELETE,
    "evict": ACTIVITY_DELETE,
    "remove": ACTIVITY_DELETE,
}

STATUS_SUCCESS, STATUS_FAILURE = 1, 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Denials matter most to a reviewer: Medium; failed authentications and errors: Low.
_SEVERITY = {"success": (1, "Informational"), "failed": (2, "Low"), "denied": (3, "Medium")}


def activity_id_for(action: str) -> int:
    verb = action.rsplit(".", 1)[-1] if action else ""
    if not verb:
        return ACTIVITY_UNKNOWN
    return _VERB_ACTIVITY.get(verb, ACTIVITY_OTHER)


def ocsf_event(record: dict[str, Any]) -> dict[str, Any]:
    """One canonical audit record as an OCSF 1.3.0 API Activity event."""
    action = record.get("action") or ""
    activity_id = activity_id_for(action)
    activity_name = ACTIVITY_NAMES[activity_id]
    outcome = record.get("outcome") or ""
    severity_id, severity = _SEVERITY.get(outcome, (0, "Unknown"))
    success = outcome == "success"
    occurred_at = str(record.get("occurred_at"))
    occurred = parse_time(occurred_at)

    user: dict[str, Any] = {"name": record.get("actor_name") or record.get("auth_method")}
    if record.get("actor_id"):
        user["uid"] = record["actor_id"]
    if record.get("key_id"):
        user["credential_uid"] = record["key_id"]
    actor: dict[str, Any] = {"user": user, "app_name": "cacheplane"}

    src_endpoint: dict[str, Any] = (
        {"ip": record["source_ip"]}
        if record.get("source_ip")
        # Events raised by Cacheplane itself (beat jobs, CLI) have no network peer.
        else {"name": "cacheplane-internal"}
    )
    service = action.split(".", 1)[0] if "." in action else action
    api: dict[str, Any] = {"operation": action, "service": {"name": f"cacheplane.{service}"}}
    if record.get("request_id"):
        api["request"] = {"uid": record["request_id"]}

    metadata: dict[str, Any] = {
        "version": OCSF_VERSION,
        "product": dict(PRODUCT),
        "uid": f"{record.get('chain')}:{record.get('seq')}",
        "sequence": record.get("seq"),
        "original_time": occurred_at,
        "log_name": "cacheplane.audit",
        "log_provider": "cacheplane",
    }
    if record.get("tenant_id"):
        metadata["tenant_uid"] = record["tenant_id"]
    if record.get("request_id"):
        metadata["correlation_uid"] = record["request_id"]

    event: dict[str, Any] = {
        "activity_id": activity_id,
        "activity_name": activity_name,
        "category_uid": CATEGORY_UID,
        "category_name": CATEGORY_NAME,
        "class_uid": CLASS_UID,
        "class_name": CLASS_NAME,
        "type_uid": CLASS_UID * 100 + activity_id,
        "type_name": f"{CLASS_NAME}: {activity_name}",
        "severity_id": severity_id,
        "severity": severity,
        "status_id": STATUS_SUCCESS if success else STATUS_FAILURE,
        "status": "Success" if success else "Failure",
        "status_detail": outcome,
        "time": (occurred - _EPOCH) // timedelta(milliseconds=1),
        "timezone_offset": 0,
        "message": f"{user['name']} {action} → {outcome}",
        "metadata": metadata,
        "actor": actor,
        "api": api,
        "src_endpoint": src_endpoint,
        "unmapped": {
            "chain": record.get("chain"),
            "seq": record.get("seq"),
            "prev_hash": record.get("prev_hash"),
            "hash": record.get("hash"),
            "auth_method": record.get("auth_method"),
            "changes": record.get("changes"),
            "details": record.get("details"),
        },
    }
    if record.get("user_agent"):
        event["http_request"] = {"user_agent": record["user_agent"]}
    if record.get("target_type") or record.get("target_id"):
        event["resources"] = [
            {"type": record.get("target_type") or "", "uid": record.get("target_id") or ""}
        ]
    return event
