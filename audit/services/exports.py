"""Audit exports: request (audited, enqueued after commit), produce (streamed, signed;
the files themselves: ``export_bundle``), download (audited).

Producing an export is deliberately not one transaction: a large export runs for
minutes and must not hold a snapshot or locks that long. It does not need one either:
events are immutable and each chain's range is fixed when the run starts, so events
appended meanwhile fall outside it. Progress and the claim are single-row updates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from audit import selectors
from audit.bundle import (
    FORMATS,
    OUTCOMES,
    ExportFilters,
)
from audit.errors import (
    ExportFileMissing,
    ExportNotReady,
    IdempotencyKeyReused,
    InvalidExportFilter,
    InvalidTimeRange,
    UnknownExportFormat,
)
from audit.models import AuditExport, ExportStatus, Outcome
from audit.services import audit_record
from audit.services.export_bundle import export_bundle_write
from audit.services.signing_keys import audit_signing_key_register
from audit.snapshot import EMPTY, diff, model_snapshot
from controlplane.errors import DomainError
from controlplane.task_queue import task_enqueue_on_commit
from tenants.actor import Actor
from tenants.models import Principal, Tenant

logger = logging.getLogger(__name__)

#: A running export whose heartbeat is older than this is presumed dead and may be
#: taken over by the next delivery of its task.
EXPORT_LEASE = timedelta(minutes=10)
#: Enqueued by name (controlplane.task_queue): the task imports this module, not back.
EXPORT_RUN_TASK = "audit.tasks.audit_export_run_task"

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class ExportRequest:
    """What a caller asks to export (validated by ``audit_export_create``)."""

    format: str
    since: datetime | None = None
    until: datetime | None = None
    actor: str | None = None
    action: str | None = None
    outcome: str | None = None


def audit_export_filters(request: ExportRequest, *, now: datetime) -> ExportFilters:
    """Validate a request into filters; ``until`` defaults to ``now`` so the export is
    the same whenever its task runs. Raises UnknownExportFormat, InvalidTimeRange,
    InvalidExportFilter."""
    if request.format not in FORMATS:
        raise UnknownExportFormat(
            f"Unknown export format {request.format!r}; use one of {', '.join(FORMATS)}.",
            details={"formats": list(FORMATS)},
        )
    for name, value in (("since", request.since), ("until", request.until)):
        if value is not None and value.tzinfo is None:
            raise InvalidTimeRange(f"{name} needs a UTC offset.")
    until = request.until or now
    if request.since is not None and request.since >= until:
        raise InvalidTimeRange("The range is empty: since must be before until.")
    actor = (request.actor or "").strip() or None
    action = (request.action or "").strip() or None
    outcome = (request.outcome or "").strip() or None
    if outcome is not None and outcome not in OUTCOMES:
        raise InvalidExportFilter(
            f"Unknown outcome {outcome!r}; use one of {', '.join(OUTCOMES)}.",
            details={"field": "outcome"},
        )
    if action is not None and (len(action) > 100 or "*" in action[:-1] or action == "*"):
        raise InvalidExportFilter(
            "action is an action name, or a prefix ending in '*' (e.g. 'tenants.*').",
            details={"field": "action"},
        )
    if actor is not None and len(actor) > 200:
        raise InvalidExportFilter("actor is too long.", details={"field": "actor"})
    return ExportFilters(
        since=request.since, until=until, actor=actor, action=action, outcome=outcome
    )


def audit_export_create(
    *,
    tenant: Tenant | None,
    actor: Actor,
    request: ExportRequest,
    filter_tenant: Tenant | None = None,
    idempotency_key: str | None = None,
    enqueue: bool = True,
) -> AuditExport:
    """Record an export request, audit it in the same transaction and enqueue its task
    after commit. ``tenant`` is the route's tenant; None makes a platform export over
    every chain, or over ``filter_tenant``'s chain only.

    A replayed ``idempotency_key`` (same principal and scope) returns the original
    export. Raises UnknownExportFormat, InvalidTimeRange, InvalidExportFilter,
    IdempotencyKeyReused (same key, different request).
    """
    now = timezone.now()
    filters = audit_export_filters(request, now=now)
    stored: dict[str, Any] = filters.to_json()
    if tenant is None and filter_tenant is not None:
        stored["tenant_id"] = str(filter_tenant.pk)
        stored["tenant_slug"] = filter_tenant.slug
    key = (idempotency_key or "").strip()[:200]
    principal = actor.principal
    with transaction.atomic():
        if key:
            if principal is not None:
                # Serializes one principal's requests, so a concurrent replay of a
                # platform export (null tenant: no unique index help) finds the first.
                Principal.objects.select_for_update().filter(pk=principal.pk).first()
            original = AuditExport.objects.filter(
                tenant=tenant, requested_by=principal, idempotency_key=key
            ).first()
            if original is not None:
                _same_request_or_raise(original, request, stored)
                return original
        export = AuditExport.objects.create(
            tenant=tenant,
            requested_by=principal,
            requested_by_name=actor.name,
            format=request.format,
            filters=stored,
            idempotency_key=key,
            created_at=now,
        )
        audit_record(
            actor=actor,
            action="audit.export.create",
            tenant=tenant,
            target_type="audit_export",
            target_id=str(export.pk),
            changes=diff(EMPTY, model_snapshot(export)),
            details={
                "scope": "tenant" if tenant is not None else "platform",
                "format": request.format,
                "filters": stored,
            },
        )
        if enqueue:
            task_enqueue_on_commit(EXPORT_RUN_TASK, str(export.pk))
    return export


def _same_request_or_raise(
    original: AuditExport, request: ExportRequest, stored: dict[str, Any]
) -> None:
    compared: tuple[str, ...] = ("since", "actor", "action", "outcome", "tenant_id")
    if request.until is not None:
        compared += ("until",)
    if original.format != request.format or any(
        original.filters.get(name) != stored.get(name) for name in compared
    ):
        raise IdempotencyKeyReused(
            "This Idempotency-Key was used for a different export request.",
            details={"export": str(original.pk)},
        )


# --- Producing the bundle -----------------------------------------------------------------


def audit_export_run(
    *, export: AuditExport, progress: ProgressCallback | None = None
) -> AuditExport:
    """Produce one export's signed bundle and mark the row succeeded, or failed with the
    error's code. Claims the row first: a no-op returning the row as it is when the
    export is finished or held by a live worker (so running it twice is harmless)."""
    if not _claim(export):
        export.refresh_from_db()
        return export
    try:
        _produce(export, progress)
    except DomainError as exc:
        _finish_failed(export, exc.code, exc.message)
    except Exception:
        logger.exception("audit export failed", extra={"export": str(export.pk)})
        _finish_failed(export, "internal_error", "The export failed; the error was logged.")
    export.refresh_from_db()
    return export


def _claim(export: AuditExport) -> bool:
    now = timezone.now()
    claimable = Q(status=ExportStatus.PENDING) | Q(
        status=ExportStatus.RUNNING, heartbeat_at__lt=now - EXPORT_LEASE
    )
    return bool(
        AuditExport.objects.filter(claimable, pk=export.pk).update(
            status=ExportStatus.RUNNING,
            started_at=now,
            heartbeat_at=now,
            processed=0,
            attempts=F("attempts") + 1,
        )
    )


def _produce(export: AuditExport, progress: ProgressCallback | None) -> None:
    signer = audit_signing_key_register()
    filters = ExportFilters.from_json(export.filters)
    segments = _segments(export, filters)
    total = sum(segment.size for segment in segments)
    AuditExport.objects.filter(pk=export.pk).update(total=total)

    def heartbeat(processed: int) -> None:
        AuditExport.objects.filter(pk=export.pk).update(
            processed=processed, heartbeat_at=timezone.now()
        )
        if progress is not None:
            progress(processed, total)

    written = export_bundle_write(
        export=export, filters=filters, segments=segments, signer=signer, heartbeat=heartbeat
    )
    if progress is not None:
        progress(total, total)
    with transaction.atomic():
        before = model_snapshot(AuditExport.objects.get(pk=export.pk))
        AuditExport.objects.filter(pk=export.pk).update(
            status=ExportStatus.SUCCEEDED,
            processed=total,
            records=written.records,
            withheld=written.withheld,
            file_name=written.path.name,
            file_size=written.size,
            file_sha256=written.sha256,
            manifest=written.manifest,
            finished_at=timezone.now(),
            heartbeat_at=timezone.now(),
        )
        audit_record(
            actor=Actor.system("audit-export"),
            action="audit.export.succeeded",
            tenant=export.tenant,
            target_type="audit_export",
            target_id=str(export.pk),
            changes=diff(before, model_snapshot(AuditExport.objects.get(pk=export.pk))),
            details={
                "records": written.records,
                "file_sha256": written.sha256,
                "key_id": signer.kid,
            },
        )


def _segments(export: AuditExport, filters: ExportFilters) -> list[selectors.ChainSegment]:
    if export.tenant is not None:
        return selectors.audit_export_segments(tenant=export.tenant, filters=filters)
    tenant_id = export.filters.get("tenant_id")
    if tenant_id:
        tenant = Tenant.objects.filter(pk=tenant_id).first()
        if tenant is None:
            return []
        return selectors.audit_export_segments(tenant=tenant, filters=filters)
    return selectors.audit_export_segments_all_tenants(filters=filters)


def _finish_failed(export: AuditExport, code: str, message: str) -> None:
    with transaction.atomic():
        before = model_snapshot(AuditExport.objects.get(pk=export.pk))
        AuditExport.objects.filter(pk=export.pk).update(
            status=ExportStatus.FAILED,
            error_code=code,
            error_message=message[:500],
            finished_at=timezone.now(),
        )
        audit_record(
            actor=Actor.system("audit-export"),
            action="audit.export.failed",
            tenant=export.tenant,
            outcome=Outcome.FAILED,
            target_type="audit_export",
            target_id=str(export.pk),
            changes=diff(before, model_snapshot(AuditExport.objects.get(pk=export.pk))),
            details={"code": code},
        )


# --- Download -----------------------------------------------------------------------------


def audit_export_download(*, export: AuditExport, actor: Actor) -> Path:
    """Audit a download of a finished export and return its bundle's path.

    Raises ExportNotReady (not succeeded) or ExportFileMissing (file removed).
    """
    if export.status != ExportStatus.SUCCEEDED or not export.file_name:
        raise ExportNotReady(
            f"The export is {export.status}; only a succeeded export can be downloaded.",
            details={"status": export.status},
        )
    path = selectors.export_dir() / export.file_name
    if not path.is_file():
        raise ExportFileMissing("The export's file is no longer available.")
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="audit.export.download",
            tenant=export.tenant,
            target_type="audit_export",
            target_id=str(export.pk),
            details={"file_sha256": export.file_sha256},
        )
    return path
