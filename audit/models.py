"""Append-only audit events in hash chains (one per tenant, one for the platform)."""

from __future__ import annotations

from django.db import models

from tenants.models import Tenant

PLATFORM_CHAIN = "platform"


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    DENIED = "denied", "Denied"
    FAILED = "failed", "Failed"


class AuditEvent(models.Model):
    """One security-relevant fact: who did what to which target, with what outcome.

    Rows are never updated or deleted: a PostgreSQL trigger rejects both (see migration
    0002). ``seq``/``prev_hash``/``hash`` link each event to the previous one of its chain.
    """

    id = models.BigAutoField(primary_key=True)
    chain = models.CharField(max_length=64)
    seq = models.BigIntegerField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    occurred_at = models.DateTimeField()
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Plain ids, not foreign keys: an audit row must outlive and never cascade from the
    # principal or key it names. Nullable strings on purpose: None ("does not apply")
    # and "" are different values in the hashed canonical record.
    actor_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    actor_name = models.CharField(max_length=200)
    auth_method = models.CharField(max_length=16)
    key_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=200, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    source_ip = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    user_agent = models.CharField(max_length=300, blank=True)
    request_id = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    changes = models.JSONField(default=dict, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "seq"], name="audit_event_unique_chain_seq")
        ]
        indexes = [
            models.Index(fields=["tenant", "occurred_at"]),
            models.Index(fields=["chain", "occurred_at"]),
            models.Index(fields=["action", "occurred_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.chain}#{self.seq} {self.action} {self.outcome}"


class AuditChainHead(models.Model):
    """The latest (seq, hash) of each chain; its row lock serializes appends."""

    chain = models.CharField(max_length=64, primary_key=True)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.chain}@{self.seq}"
