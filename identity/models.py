"""Who a principal is at the identity provider, and what its groups grant here.

``ExternalIdentity`` links a principal to one ``(issuer, subject)`` pair: the only stable
identifier an OpenID provider promises (usernames and e-mail addresses change and are
reused). ``GroupMapping`` is a platform admin's rule "members of IdP group G hold role R
on tenant T"; ``MappedBinding`` remembers which bindings a mapping granted, so the
reconciliation at each login removes only those, never a binding made by hand.
"""

from __future__ import annotations

import uuid

from django.db import models

from tenants.models import Principal, Role, Tenant


class ExternalIdentity(models.Model):
    """A principal's account at an OpenID provider (created at its first SSO login)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    principal = models.ForeignKey(
        Principal, on_delete=models.PROTECT, related_name="external_identities"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    # The groups the provider asserted at the last login (evidence for the console and
    # for a later reconciliation; not an authority on its own).
    groups = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="external_identity_unique_subject"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject}@{self.issuer}"


class GroupMapping(models.Model):
    """Members of the IdP group ``group`` hold ``role`` on ``tenant`` (reconciled at login)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="group_mappings")
    group = models.CharField(max_length=255)
    role = models.ForeignKey(Role, on_delete=models.PROTECT, related_name="group_mappings")
    created_by = models.ForeignKey(Principal, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "group", "role"], name="group_mapping_unique_per_tenant"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "group"]), models.Index(fields=["group"])]
        ordering = ["group", "tenant__slug"]

    def __str__(self) -> str:
        return f"{self.group} -> {self.role_id} @ {self.tenant_id}"


class MappedBinding(models.Model):
    """A role binding that the group mapping granted (and may therefore take away)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    principal = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    role = models.ForeignKey(Role, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "principal", "role"], name="mapped_binding_unique"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "principal"])]

    def __str__(self) -> str:
        return f"{self.principal_id} -> {self.role_id} @ {self.tenant_id} (idp)"


class ScimToken(models.Model):
    """The bearer token an IdP's SCIM client presents (only its SHA-256 digest is kept)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The non-secret start, for display.")
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(Principal, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class ScimGroup(models.Model):
    """A group the IdP provisions over SCIM; its ``display_name`` is what group mappings
    match (the same names the OIDC groups claim carries)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    display_name = models.CharField(max_length=255, unique=True)
    external_id = models.CharField(max_length=255, blank=True, default="")
    members = models.ManyToManyField(Principal, related_name="scim_groups", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["display_name"]

    def __str__(self) -> str:
        return self.display_name


class Invitation(models.Model):
    """A pending invitation: the person exists without a password until they accept.

    The link's token is Django's password-reset token for the invited principal (single
    use: it covers the password hash; expiring: ``PASSWORD_RESET_TIMEOUT``). Revoking
    gives the principal a fresh unusable password, which voids the token.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    principal = models.OneToOneField(Principal, on_delete=models.PROTECT, related_name="invitation")
    email = models.EmailField(max_length=254)
    roles = models.JSONField(default=list, blank=True, help_text="[[tenant slug, role], ...]")
    created_by = models.ForeignKey(Principal, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation of {self.principal_id}"
