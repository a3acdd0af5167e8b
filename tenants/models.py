"""Tenants and the principals that act on them.

Roles, bindings and API keys (the IAM policy) live beside these models; authorization
goes through ``tenants.services.authorize`` only.
"""

from __future__ import annotations

import secrets
import uuid

from django.contrib.auth.models import AbstractUser
from django.contrib.postgres.fields import ArrayField
from django.core.validators import RegexValidator
from django.db import models

from tenants.scoping import TenantScopedManager

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
    # Bumped on every IAM policy replacement; the policy's etag is derived from it.
    policy_version = models.PositiveIntegerField(default=1)
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
    # Set when a person is removed (console, REST or SCIM DELETE): the row stays for the
    # audit history, disabled and without bindings; SCIM no longer lists it.
    removed_at = models.DateTimeField(null=True, blank=True)

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


ROLE_NAME_VALIDATOR = RegexValidator(
    r"^[a-zA-Z][a-zA-Z0-9_.-]{2,63}$",
    "3-64 characters: letters, digits, '.', '_' and '-', starting with a letter.",
)


class RoleScope(models.TextChoices):
    TENANT = "tenant", "Tenant"
    PLATFORM = "platform", "Platform"


class Role(models.Model):
    """A named set of permissions.

    Predefined roles (``tenant`` is null) are seeded from ``tenants.permissions`` and are
    read-only; custom roles belong to one tenant and hold tenant permissions only.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="custom_roles"
    )
    name = models.CharField(max_length=64, validators=[ROLE_NAME_VALIDATOR])
    title = models.CharField(max_length=200)
    description = models.CharField(max_length=500, blank=True)
    scope = models.CharField(max_length=16, choices=RoleScope.choices, default=RoleScope.TENANT)
    permissions = ArrayField(models.CharField(max_length=64), default=list)
    is_predefined = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="role_unique_name_per_tenant"),
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(tenant__isnull=True),
                name="role_unique_predefined_name",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "name"])]

    def __str__(self) -> str:
        return self.name if self.tenant_id is None else f"{self.tenant_id}/{self.name}"


class RoleBinding(models.Model):
    """Grants a role to a principal at one scope: a tenant, or the platform (tenant null).

    A tenant's bindings are its IAM policy, replaced as a whole under an etag.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="bindings"
    )
    principal = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="bindings")
    role = models.ForeignKey(Role, on_delete=models.PROTECT, related_name="bindings")
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "principal", "role"], name="binding_unique_per_scope"
            ),
            models.UniqueConstraint(
                fields=["principal", "role"],
                condition=models.Q(tenant__isnull=True),
                name="binding_unique_platform",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "principal"])]

    def __str__(self) -> str:
        return f"{self.principal_id} -> {self.role_id} @ {self.tenant_id or 'platform'}"


class ApiKey(models.Model):
    """A bearer credential for a principal within one tenant.

    Only a keyed digest of the secret is stored (``digest``, HMAC-SHA256 under the
    deployment secret); the plaintext is shown once at creation. ``prefix`` is the
    non-secret start of the key, shown in listings so people can tell keys apart.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="api_keys")
    principal = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(Principal, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        indexes = [models.Index(fields=["tenant", "created_at"])]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"
