"""IAM policy: etag replacement, escalation refusal, last admin, concurrent writers."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from audit.models import AuditEvent
from tenants.errors import (
    EscalationDenied,
    EtagMismatch,
    LastTenantAdmin,
    UnknownPrincipal,
    UnknownRole,
)
from tenants.models import RoleBinding
from tenants.services import iam
from tests.factories import HumanFactory, ServiceAccountFactory, actor_for, bind


def _specs(policy):
    return [
        iam.BindingSpec(role=b.role.name, principal_id=str(b.principal_id), expires_at=b.expires_at)
        for b in policy.bindings
    ]


@pytest.mark.django_db
def test_set_with_current_etag_replaces_bindings_and_bumps_etag(tenant_a, admin_a) -> None:
    dev = HumanFactory()
    policy = iam.policy_get(tenant=tenant_a)
    new = iam.policy_set(
        actor=actor_for(admin_a),
        tenant=tenant_a,
        etag=policy.etag,
        bindings=[*_specs(policy), iam.BindingSpec("tenant.developer", str(dev.pk))],
    )
    assert new.etag != policy.etag
    assert {(b.role.name, b.principal.username) for b in new.bindings} == {
        ("tenant.admin", "alice"),
        ("tenant.developer", dev.username),
    }
    event = AuditEvent.objects.filter(action="tenants.policy.set").get()
    assert event.outcome == "success"
    assert event.changes["version"] == {"before": 1, "after": 2}


@pytest.mark.django_db
def test_stale_etag_is_refused_and_changes_nothing(tenant_a, admin_a) -> None:
    policy = iam.policy_get(tenant=tenant_a)
    iam.policy_set(
        actor=actor_for(admin_a), tenant=tenant_a, etag=policy.etag, bindings=_specs(policy)
    )
    with pytest.raises(EtagMismatch):
        iam.policy_set(
            actor=actor_for(admin_a),
            tenant=tenant_a,
            etag=policy.etag,
            bindings=[*_specs(policy), iam.BindingSpec("tenant.viewer", str(HumanFactory().pk))],
        )
    assert RoleBinding.objects.filter(tenant=tenant_a).count() == 1


@pytest.mark.django_db
def test_granting_a_role_with_permissions_the_caller_lacks_is_escalation(tenant_a) -> None:
    iam_admin = HumanFactory()
    # A custom role that may edit the policy but holds nothing else.
    iam.role_create(
        actor=actor_for(_superuser(tenant_a)),
        tenant=tenant_a,
        name="policyEditor",
        title="Policy editor",
        permissions=["iam.get", "iam.set"],
    )
    bind(iam_admin, "policyEditor", tenant_a)
    policy = iam.policy_get(tenant=tenant_a)
    with pytest.raises(EscalationDenied) as raised:
        iam.policy_set(
            actor=actor_for(iam_admin),
            tenant=tenant_a,
            etag=policy.etag,
            bindings=[*_specs(policy), iam.BindingSpec("tenant.admin", str(iam_admin.pk))],
        )
    assert "caches.delete" in raised.value.details["missing_permissions"]
    # Custom roles obey the same rule.
    with pytest.raises(EscalationDenied):
        iam.role_create(
            actor=actor_for(iam_admin),
            tenant=tenant_a,
            name="sneaky",
            title="Sneaky",
            permissions=["caches.delete"],
        )


def _superuser(tenant):
    user = HumanFactory()
    bind(user, "tenant.admin", tenant)
    return user


@pytest.mark.django_db
def test_last_tenant_admin_cannot_be_removed(tenant_a, admin_a) -> None:
    policy = iam.policy_get(tenant=tenant_a)
    with pytest.raises(LastTenantAdmin):
        iam.policy_set(actor=actor_for(admin_a), tenant=tenant_a, etag=policy.etag, bindings=[])
    assert RoleBinding.objects.filter(tenant=tenant_a, role__name="tenant.admin").count() == 1


@pytest.mark.django_db
def test_bindings_cannot_name_another_tenants_service_account(tenant_a, tenant_b, admin_a) -> None:
    foreign = ServiceAccountFactory(tenant=tenant_b)
    policy = iam.policy_get(tenant=tenant_a)
    with pytest.raises(UnknownPrincipal):
        iam.policy_set(
            actor=actor_for(admin_a),
            tenant=tenant_a,
            etag=policy.etag,
            bindings=[*_specs(policy), iam.BindingSpec("tenant.viewer", str(foreign.pk))],
        )
    with pytest.raises(UnknownRole):
        iam.policy_set(
            actor=actor_for(admin_a),
            tenant=tenant_a,
            etag=policy.etag,
            bindings=[*_specs(policy), iam.BindingSpec("platform.admin", str(admin_a.pk))],
        )


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_sets_with_one_etag_exactly_one_wins(tenant_a, admin_a) -> None:
    policy = iam.policy_get(tenant=tenant_a)
    users = [HumanFactory() for _ in range(20)]
    results: list[str] = []
    barrier = threading.Barrier(20)

    def attempt(user) -> None:
        from django.db import connections

        try:
            barrier.wait(timeout=10)
            iam.policy_set(
                actor=actor_for(admin_a),
                tenant=tenant_a,
                etag=policy.etag,
                bindings=[*_specs(policy), iam.BindingSpec("tenant.viewer", str(user.pk))],
            )
            results.append("ok")
        except EtagMismatch:
            results.append("conflict")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == ["conflict"] * 19 + ["ok"]
    assert RoleBinding.objects.filter(tenant=tenant_a).count() == 2
    connection.close()
