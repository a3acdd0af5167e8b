"""Tenants and the principals that act on them.

Roles, bindings and API keys (the IAM policy) live beside these models; authorization
goes through ``tenants.services.authorize`` only.
"""

from __future__ import annotations

import secrets
import uuid

from django.contrib.auth.models import AbstractUser
from django.core.validators import RegexValidator
from django.db import models

SLUG_VALIDATOR = RegexValidator(
    r"^[a-z][a-z0-9-]{1,38}[a-z0-9]$",
    "3-40 characters: lowercase letters, digits and hyphens, starting with a letter.",
)


def _new_salt_secret() -> str:
    return secrets.token_hex(32)


class TenantState(models.TextChoices):
    ACTIVE = "active", "Active"
    SUSPENDED = "suspended", "Suspended"


class Tenant(models.Model):
    """A customer of the shared LLM infrastructure; owns caches, keys, budgets and usage.

    ``slug`` is immutable (it appears in URLs, audit rows and metric labels). The cache
    salt secret and its version feed the per-tenant vLLM ``cache_salt``; rotating them
    makes every cached block of the tenant unreachable at once.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.CharField(max_length=40, unique=True, validators=[SLUG_VALIDATOR])
    display_name = models.CharField(max_length=200)
    state = models.CharField(
        max_length=16, choices=TenantState.choices, default=TenantState.ACTIVE, db_index=True
    )
    cache_salt_secret = models.CharField(max_length=64, default=_new_salt_secret, editable=False)
    cache_salt_version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    suspended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def is_active(self) -> bool:
        return self.state == TenantState.ACTIVE


class PrincipalKind(models.TextChoices):
    HUMAN = "human", "Human user"
    SERVICE = "service", "Service account"


class Principal(AbstractUser):
    """Anyone who acts: a human (session login to the console) or a service account.

    Service accounts belong to one tenant, have no usable password and authenticate with
    API keys only. Humans may be bound to several tenants through role bindings.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(
        max_length=16, choices=PrincipalKind.choices, default=PrincipalKind.HUMAN
    )
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="service_accounts",
        help_text="Owning tenant; set for service accounts only.",
    )
    description = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="principal_service_account_has_tenant",
                condition=models.Q(kind="human") | models.Q(tenant__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.username

    @property
    def is_service_account(self) -> bool:
        return self.kind == PrincipalKind.SERVICE
