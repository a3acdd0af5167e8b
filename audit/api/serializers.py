"""Input and output shapes of the audit API (inputs and outputs are separate classes)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from audit.bundle import FORMATS, OUTCOMES
from audit.errors import InvalidExportFilter, InvalidTimeRange
from audit.models import AuditEvent, AuditExport, ExportStatus
from audit.selectors import audit_event_record

# Format and outcome are plain strings here so that the service answers an unknown one
# with its stable code (`unknown_export_format`, `invalid_export_filter`); the schema
# still lists the values.


@extend_schema_field({"type": "string", "enum": list(FORMATS)})
class ExportFormatField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "enum": list(OUTCOMES)})
class OutcomeField(serializers.CharField):
    pass


class AuditEventSearchInput(serializers.Serializer[None]):
    action = serializers.CharField(
        required=False, max_length=101, help_text="An action, or a prefix ending in '*'."
    )
    outcome = OutcomeField(required=False, max_length=16)
    actor = serializers.CharField(
        required=False, max_length=200, help_text="The actor's principal id or name."
    )
    since = serializers.DateTimeField(required=False, help_text="Inclusive.")
    until = serializers.DateTimeField(required=False, help_text="Exclusive.")

    def validate_outcome(self, value: str) -> str:
        if value not in OUTCOMES:
            raise InvalidExportFilter(
                f"Unknown outcome {value!r}; use one of {', '.join(OUTCOMES)}.",
                details={"field": "outcome"},
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since is not None and until is not None and since >= until:
            raise InvalidTimeRange("The range is empty: since must be before until.")
        return attrs


class AuditEventOut(serializers.Serializer[AuditEvent]):
    """An audit event as its canonical, hash-covered record (plus its hash)."""

    chain = serializers.CharField()
    seq = serializers.IntegerField()
    prev_hash = serializers.CharField()
    hash = serializers.CharField()
    occurred_at = serializers.DateTimeField()
    tenant_id = serializers.CharField(allow_null=True)
    actor_id = serializers.CharField(allow_null=True)
    actor_name = serializers.CharField()
    auth_method = serializers.CharField()
    key_id = serializers.CharField(allow_null=True)
    action = serializers.CharField()
    target_type = serializers.CharField()
    target_id = serializers.CharField()
    outcome = serializers.CharField()
    source_ip = serializers.CharField(allow_null=True)
    user_agent = serializers.CharField()
    request_id = serializers.CharField(allow_null=True)
    changes = serializers.DictField()
    details = serializers.DictField()

    def to_representation(self, instance: AuditEvent) -> dict[str, Any]:
        return audit_event_record(instance)


class AuditExportCreateInput(serializers.Serializer[None]):
    format = ExportFormatField(max_length=16, help_text="jsonl (canonical), csv or ocsf.")
    since = serializers.DateTimeField(required=False, allow_null=True, help_text="Inclusive.")
    until = serializers.DateTimeField(
        required=False, allow_null=True, help_text="Exclusive; default: the request time."
    )
    actor = serializers.CharField(
        required=False, allow_blank=True, max_length=200, help_text="Principal id or name."
    )
    action = serializers.CharField(
        required=False, allow_blank=True, max_length=101, help_text="Action or 'prefix*'."
    )
    outcome = OutcomeField(required=False, allow_blank=True, max_length=16)


class PlatformAuditExportCreateInput(AuditExportCreateInput):
    tenant = serializers.SlugField(
        required=False,
        allow_blank=True,
        max_length=40,
        help_text="Export only this tenant's chain; omit for every chain.",
    )


class AuditExportErrorOut(serializers.Serializer[dict[str, str]]):
    code = serializers.CharField()
    message = serializers.CharField()


class AuditExportOut(serializers.ModelSerializer[AuditExport]):
    format = ExportFormatField()
    # A plain string in the schema: an enum component named "StatusEnum" would collide
    # with other apps' status fields.
    status = serializers.CharField(help_text="pending, running, succeeded or failed.")
    scope = serializers.SerializerMethodField()
    tenant = serializers.SerializerMethodField()
    requested_by = serializers.CharField(source="requested_by_name")
    progress = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = AuditExport
        fields = [
            "id",
            "scope",
            "tenant",
            "format",
            "filters",
            "status",
            "total",
            "processed",
            "progress",
            "records",
            "withheld",
            "error",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
            "file_size",
            "file_sha256",
            "download_url",
        ]
        read_only_fields = fields

    def get_scope(self, export: AuditExport) -> str:
        return "tenant" if export.tenant_id else "platform"

    def get_tenant(self, export: AuditExport) -> str | None:
        if export.tenant is not None:
            return export.tenant.slug
        slug: str | None = export.filters.get("tenant_slug")
        return slug

    def get_progress(self, export: AuditExport) -> float:
        if export.status == ExportStatus.SUCCEEDED:
            return 1.0
        if not export.total:
            return 0.0
        return round(min(export.processed / export.total, 1.0), 4)

    @extend_schema_field(AuditExportErrorOut(allow_null=True))
    def get_error(self, export: AuditExport) -> dict[str, str] | None:
        if not export.error_code:
            return None
        return {"code": export.error_code, "message": export.error_message}

    def get_download_url(self, export: AuditExport) -> str | None:
        if export.status != ExportStatus.SUCCEEDED:
            return None
        if export.tenant is not None:
            return reverse(
                "tenant-audit-export-download",
                kwargs={"tenant": export.tenant.slug, "pk": str(export.pk)},
            )
        return reverse("platform-audit-export-download", kwargs={"pk": str(export.pk)})


class AuditExportDetailOut(AuditExportOut):
    """An export with its signed manifest (once it succeeded)."""

    class Meta(AuditExportOut.Meta):
        fields = [*AuditExportOut.Meta.fields, "manifest"]
        read_only_fields = fields


class SigningKeyOut(serializers.Serializer[dict[str, Any]]):
    kid = serializers.CharField()
    algorithm = serializers.CharField()
    public_key = serializers.CharField(help_text="PEM (SubjectPublicKeyInfo).")
    public_key_sha256 = serializers.CharField(source="fingerprint")
    created_at = serializers.DateTimeField(allow_null=True)
    retired_at = serializers.DateTimeField(allow_null=True)
    active = serializers.BooleanField()


class SigningKeySetOut(serializers.Serializer[dict[str, Any]]):
    keys = SigningKeyOut(many=True)
