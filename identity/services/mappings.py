"""IdP group → role binding rules, and their reconciliation at each SSO login.

A mapping says "members of IdP group G hold role R on tenant T". At every login the
principal's bindings are made to match its current groups: a mapped binding it lacks is
added, and a binding the mapping granted earlier whose group is gone is removed. Both go
through ``tenants.services.iam.policy_set`` (the tenant row lock, the etag, the
last-admin rule, the ``tenants.policy.set`` audit row), with the actor
``AuthMethod.IDP_MAPPING`` so the audit log shows the change as the mapping's. A binding
made by hand is never removed by the mapping (``MappedBinding`` records only the
mapping's own grants).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from audit.services import audit_record
from audit.services.denials import audit_denial
from audit.snapshot import EMPTY, diff, model_snapshot
from controlplane.errors import NotFound, ValidationFailed
from identity.models import GroupMapping, MappedBinding
from tenants.actor import Actor, AuthMethod
from tenants.errors import DuplicateName, EtagMismatch, LastTenantAdmin
from tenants.models import Principal, RoleBinding, Tenant
from tenants.services.iam import BindingSpec, policy_get, policy_set, role_resolve

#: Concurrent policy edits on one tenant: re-read and retry the etag this many times.
RECONCILE_ATTEMPTS = 3


def group_mapping_list() -> QuerySet[GroupMapping]:
    """Every mapping, all tenants (a platform view: mappings are platform configuration)."""
    return GroupMapping.objects.select_related("tenant", "role").order_by("group", "tenant__slug")


def group_mapping_create(*, actor: Actor, tenant: Tenant, group: str, role: str) -> GroupMapping:
    """Map IdP ``group`` to the tenant role named ``role`` (predefined or the tenant's own).

    Raises ValidationFailed (empty group), UnknownRole, DuplicateName. The caller has been
    admitted for ``tenants.manage`` (platform admins only). Audited
    ``identity.group_mapping.create`` on the tenant's chain.
    """
    group = (group or "").strip()
    if not group or len(group) > 255:
        raise ValidationFailed("A group name is 1-255 characters.", details={"field": "group"})
    resolved = role_resolve(tenant=tenant, name=role)
    with transaction.atomic():
        try:
            with transaction.atomic():
                mapping = GroupMapping.objects.create(
                    tenant=tenant, group=group, role=resolved, created_by=actor.principal
                )
        except IntegrityError:
            raise DuplicateName(
                f"Group {group!r} is already mapped to {role} on this tenant."
            ) from None
        audit_record(
            actor=actor,
            action="identity.group_mapping.create",
            tenant=tenant,
            target_type="group_mapping",
            target_id=str(mapping.pk),
            changes=diff(EMPTY, model_snapshot(mapping)),
            details={"group": group, "role": resolved.name},
        )
    return mapping


def group_mapping_delete(*, actor: Actor, mapping_id: str) -> None:
    """Delete a mapping; bindings it granted go at each holder's next login.

    Raises NotFound. Audited ``identity.group_mapping.delete`` on the tenant's chain.
    """
    with transaction.atomic():
        try:
            mapping = (
                GroupMapping.objects.select_for_update(of=("self",))
                .select_related("tenant", "role")
                .get(pk=mapping_id)
            )
        except (GroupMapping.DoesNotExist, ValueError, TypeError):
            raise NotFound("No such group mapping.") from None
        before = model_snapshot(mapping)
        tenant, group, role = mapping.tenant, mapping.group, mapping.role.name
        mapping.delete()
        audit_record(
            actor=actor,
            action="identity.group_mapping.delete",
            tenant=tenant,
            target_type="group_mapping",
            target_id=str(mapping_id),
            changes=diff(before, EMPTY),
            details={"group": group, "role": role},
        )


@dataclass(frozen=True)
class Reconciled:
    """What one login's reconciliation changed: ``(tenant slug, role name)`` pairs."""

    added: tuple[tuple[str, str], ...]
    removed: tuple[tuple[str, str], ...]


def principal_groups(principal: Principal, asserted: Iterable[str] = ()) -> list[str]:
    """The groups that drive ``principal``'s mapped bindings: those the IdP asserted in
    its last ID token plus its SCIM groups (``identity.services.scim``)."""
    names = set(asserted)
    names.update(principal.scim_groups.values_list("display_name", flat=True))
    return sorted(names)


def idp_mapping_actor(*, principal: Principal, source_ip: str | None, user_agent: str) -> Actor:
    """The actor of the mapping's changes: no principal, the IdP mapping as the method."""
    return Actor(
        principal=None,
        auth_method=AuthMethod.IDP_MAPPING,
        source_ip=source_ip,
        user_agent=f"idp-mapping for {principal.username}"[:300] if not user_agent else user_agent,
    )


def bindings_reconcile(
    *,
    principal: Principal,
    groups: list[str],
    source_ip: str | None = None,
    user_agent: str = "",
    actor: Actor | None = None,
) -> Reconciled:
    """Make ``principal``'s mapped bindings equal what ``groups`` map to (see the module).

    One ``policy_set`` per tenant that changes, each its own transaction and audit row
    (``tenants.policy.set`` by ``idp_mapping``, details naming the principal and groups).
    A removal the last-admin rule refuses is kept, and the refusal audited
    (``identity.group_mapping.reconcile``, denied, ``last_tenant_admin``).
    """
    wanted: dict[str, set[str]] = {}
    tenants: dict[str, Tenant] = {}
    for mapping in GroupMapping.objects.filter(group__in=set(groups)).select_related(
        "tenant", "role"
    ):
        wanted.setdefault(str(mapping.tenant_id), set()).add(mapping.role.name)
        tenants[str(mapping.tenant_id)] = mapping.tenant
    granted: dict[str, set[str]] = {}
    for row in MappedBinding.objects.filter(principal=principal).select_related("tenant", "role"):
        granted.setdefault(str(row.tenant_id), set()).add(row.role.name)
        tenants[str(row.tenant_id)] = row.tenant
    # A SCIM call passes its own actor (the IdP's token); a login is the mapping's.
    actor = actor or idp_mapping_actor(
        principal=principal, source_ip=source_ip, user_agent=user_agent
    )
    added: list[tuple[str, str]] = []
    removed: list[tuple[str, str]] = []
    for tenant_id, tenant in sorted(tenants.items(), key=lambda item: item[1].slug):
        add = wanted.get(tenant_id, set()) - granted.get(tenant_id, set())
        drop = granted.get(tenant_id, set()) - wanted.get(tenant_id, set())
        if not add and not drop:
            continue
        done_add, done_drop = _tenant_reconcile(
            actor=actor, tenant=tenant, principal=principal, add=add, drop=drop, groups=groups
        )
        added += [(tenant.slug, r) for r in sorted(done_add)]
        removed += [(tenant.slug, r) for r in sorted(done_drop)]
    return Reconciled(added=tuple(added), removed=tuple(removed))


def _tenant_reconcile(
    *,
    actor: Actor,
    tenant: Tenant,
    principal: Principal,
    add: set[str],
    drop: set[str],
    groups: list[str],
) -> tuple[set[str], set[str]]:
    for attempt in range(RECONCILE_ATTEMPTS):
        policy = policy_get(tenant=Tenant.objects.get(pk=tenant.pk))
        mine = {b.role.name for b in policy.bindings if b.principal_id == principal.pk}
        # A role already held by hand is not the mapping's to record or to take away.
        to_add = add - mine
        specs = [
            BindingSpec(role=b.role.name, principal_id=str(b.principal_id), expires_at=b.expires_at)
            for b in policy.bindings
            if not (b.principal_id == principal.pk and b.role.name in drop)
        ] + [BindingSpec(role=r, principal_id=str(principal.pk)) for r in sorted(to_add)]
        try:
            with transaction.atomic():
                if to_add or drop & mine:
                    policy_set(
                        actor=actor,
                        tenant=tenant,
                        etag=policy.etag,
                        bindings=specs,
                        details={
                            "reason": "idp_group_mapping",
                            "principal": str(principal.pk),
                            "username": principal.username,
                            "groups": sorted(groups)[:50],
                        },
                    )
                _mapped_rows_update(tenant=tenant, principal=principal, add=to_add, drop=drop)
            return to_add, drop & mine
        except EtagMismatch:
            if attempt == RECONCILE_ATTEMPTS - 1:
                raise
        except LastTenantAdmin:
            # The tenant keeps its last admin: the removal is refused (audited), the
            # additions still go through on the next attempt.
            audit_denial(
                actor=actor,
                action="identity.group_mapping.reconcile",
                tenant=tenant,
                target_type="principal",
                target_id=str(principal.pk),
                details={"reason": "last_tenant_admin", "kept": sorted(drop & mine)},
            )
            drop = set()
            if not add:
                return set(), set()
    return set(), set()


def _mapped_rows_update(
    *, tenant: Tenant, principal: Principal, add: set[str], drop: set[str]
) -> None:
    if drop:
        MappedBinding.objects.filter(
            tenant=tenant, principal=principal, role__name__in=drop
        ).delete()
    for name in add:
        binding = RoleBinding.objects.select_related("role").get(
            tenant=tenant, principal=principal, role__name=name
        )
        MappedBinding.objects.get_or_create(tenant=tenant, principal=principal, role=binding.role)
