"""The provider-keys console page through the Django test client: the same service and
audit rows as the REST API, the key never in a page (nor in the session when a form is
posted after it expired), errors by their field with nothing written, a viewer's posts
refused and audited, a fixed number of queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from gateway import provider_credentials
from gateway.models import ProviderCredential
from tests.factories import HumanFactory, actor_for, bind

pytestmark = pytest.mark.django_db

SECRET = "sk-ant-console-secret-0123456789"
ROTATED = "sk-ant-console-rotated-9876543210"


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _base(tenant) -> str:
    return f"/t/{tenant.slug}/provider-credentials"


def _actions(tenant) -> list[str]:
    return list(
        AuditEvent.objects.filter(
            tenant=tenant, target_type="provider_credential", outcome="success"
        )
        .order_by("seq")
        .values_list("action", flat=True)
    )


def _rows(tenant) -> list[dict]:
    return list(ProviderCredential.objects.filter(tenant=tenant).order_by("provider").values())


def test_a_key_is_added_rotated_switched_and_removed_through_the_gateway_service(
    admin_a, tenant_a
) -> None:
    client = _login(admin_a)
    base = _base(tenant_a)
    page = client.get(f"{base}/")
    assert page.status_code == 200
    assert 'id="provider-credential-form"' in page.content.decode()

    added = client.post(
        f"{base}/new",
        {
            "new-secret-provider": "anthropic",
            "new-secret-api_key": SECRET,
            "new-secret-cache_autopilot": "on",
        },
    )
    assert added.status_code == 302
    row = ProviderCredential.objects.get(tenant=tenant_a, provider="anthropic")
    assert row.cache_autopilot is True and row.created_by_id == admin_a.pk
    first = row.fingerprint
    html = client.get(f"{base}/").content.decode()
    assert f"fingerprint {first}" in html  # the flash message
    assert f'<code class="fingerprint">{first}</code>' in html
    assert SECRET not in html and row.secret_sealed not in html

    rotated = client.post(f"{base}/anthropic/rotate", {"anthropic-secret-api_key": ROTATED})
    assert rotated.status_code == 302
    row.refresh_from_db()
    assert row.fingerprint != first
    html = client.get(f"{base}/").content.decode()
    assert f'<code class="fingerprint">{row.fingerprint}</code>' in html and first not in html
    assert ROTATED not in html and SECRET not in html

    # Its history (the audit rows of this key, rotation included) is a link away.
    history = f"/t/{tenant_a.slug}/history/provider_credential/{row.pk}/"
    assert f'href="{history}"' in html
    shown = client.get(history)
    assert (
        shown.status_code == 200 and "gateway.provider_credential.rotate" in shown.content.decode()
    )
    assert ROTATED not in shown.content.decode() and SECRET not in shown.content.decode()

    switched = client.post(f"{base}/anthropic/autopilot", {"cache_autopilot": "off"})
    assert switched.status_code == 302
    row.refresh_from_db()
    assert row.cache_autopilot is False

    removed = client.post(f"{base}/anthropic/remove")
    assert removed.status_code == 302
    assert not ProviderCredential.objects.filter(tenant=tenant_a).exists()
    assert _actions(tenant_a) == [
        "gateway.provider_credential.set",
        "gateway.provider_credential.rotate",
        "gateway.provider_credential.update",
        "gateway.provider_credential.delete",
    ]
    events = AuditEvent.objects.filter(tenant=tenant_a, target_type="provider_credential")
    assert {e.auth_method for e in events} == {"session"}
    assert {e.actor_id for e in events} == {str(admin_a.pk)}
    recorded = str(list(AuditEvent.objects.values("changes", "details")))
    assert SECRET not in recorded and ROTATED not in recorded


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("sk-shrt", "API key must be 8-512 characters."),
        ("has a space in it", "API key must not contain spaces or control characters."),
        ("k" * 513, "Ensure this value has at most 512 characters"),
    ],
)
def test_a_bad_key_is_shown_next_to_its_field_not_echoed_and_nothing_is_written(
    admin_a, tenant_a, key, message
) -> None:
    response = _login(admin_a).post(
        f"{_base(tenant_a)}/new",
        {"new-secret-provider": "openai", "new-secret-api_key": key},
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_new-secret-api_key-error"' in html and message in html
    assert key not in html
    assert not ProviderCredential.objects.filter(tenant=tenant_a).exists()
    assert not AuditEvent.objects.filter(tenant=tenant_a, target_type="provider_credential")


def test_a_service_error_names_its_stable_code_under_the_field(admin_a, tenant_a) -> None:
    html = (
        _login(admin_a)
        .post(
            f"{_base(tenant_a)}/new",
            {"new-secret-provider": "openai", "new-secret-api_key": "sk-shrt"},
        )
        .content.decode()
    )
    assert "Details: invalid_provider_credential" in html


def test_adding_a_provider_that_has_a_key_is_refused_by_its_field_and_replaces_nothing(
    admin_a, tenant_a
) -> None:
    provider_credentials.provider_credential_set(
        tenant=tenant_a, actor=actor_for(admin_a), provider="anthropic", secret=SECRET
    )
    before = _rows(tenant_a)
    response = _login(admin_a).post(
        f"{_base(tenant_a)}/new",
        {"new-secret-provider": "anthropic", "new-secret-api_key": ROTATED},
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_new-secret-provider-error"' in html and "already has a key" in html
    assert _rows(tenant_a) == before
    assert _actions(tenant_a) == ["gateway.provider_credential.set"]


def test_a_bad_rotation_is_shown_in_its_row_and_keeps_the_current_key(admin_a, tenant_a) -> None:
    provider_credentials.provider_credential_set(
        tenant=tenant_a, actor=actor_for(admin_a), provider="anthropic", secret=SECRET
    )
    before = _rows(tenant_a)
    response = _login(admin_a).post(
        f"{_base(tenant_a)}/anthropic/rotate", {"anthropic-secret-api_key": "bad key!"}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_anthropic-secret-api_key-error"' in html
    assert '<details class="sub" open data-rotate="anthropic">' in html
    assert "bad key!" not in html
    assert _rows(tenant_a) == before


def test_a_provider_without_a_key_or_unknown_is_a_404(admin_a, tenant_a) -> None:
    client = _login(admin_a)
    for path in ("openai/rotate", "openai/remove", "vertex/autopilot", "x%3Cy/remove"):
        response = client.post(f"{_base(tenant_a)}/{path}", {"cache_autopilot": "on"})
        assert response.status_code == 404, path
    assert not AuditEvent.objects.filter(tenant=tenant_a, target_type="provider_credential")


def test_every_provider_set_leaves_no_add_form(admin_a, tenant_a) -> None:
    for provider in ("anthropic", "openai", "deepseek"):
        provider_credentials.provider_credential_set(
            tenant=tenant_a, actor=actor_for(admin_a), provider=provider, secret=SECRET
        )
    html = _login(admin_a).get(f"{_base(tenant_a)}/").content.decode()
    assert 'id="provider-credential-form"' not in html and 'id="all-providers-set"' in html
    assert html.count('class="stack credential-rotate"') == 3


def test_a_viewer_sees_the_keys_without_forms_and_its_posts_are_refused_and_audited(
    admin_a, tenant_a
) -> None:
    provider_credentials.provider_credential_set(
        tenant=tenant_a, actor=actor_for(admin_a), provider="anthropic", secret=SECRET
    )
    before = _rows(tenant_a)
    viewer = HumanFactory()
    bind(viewer, "tenant.viewer", tenant_a)
    client = _login(viewer)
    html = client.get(f"{_base(tenant_a)}/").content.decode()
    assert 'id="provider-credentials-table"' in html and before[0]["fingerprint"] in html
    assert "<form" not in html.split('id="content"')[1]  # the log-out form is in the header
    assert f"{_base(tenant_a)}/" in client.get(f"/t/{tenant_a.slug}/").content.decode()
    posts = {
        "new": {"new-secret-provider": "openai", "new-secret-api_key": ROTATED},
        "anthropic/rotate": {"anthropic-secret-api_key": ROTATED},
        "anthropic/autopilot": {"cache_autopilot": "off"},
        "anthropic/remove": {},
    }
    for path, data in posts.items():
        denied = AuditEvent.objects.filter(
            tenant=tenant_a, outcome="denied", actor_id=str(viewer.pk)
        ).count()
        response = client.post(f"{_base(tenant_a)}/{path}", data)
        assert response.status_code == 403, path
        assert ROTATED not in response.content.decode()
        assert (
            AuditEvent.objects.filter(
                tenant=tenant_a, outcome="denied", actor_id=str(viewer.pk)
            ).count()
            == denied + 1
        ), path
    assert _rows(tenant_a) == before


def test_a_member_without_the_read_permission_sees_no_link_and_gets_a_403(tenant_a) -> None:
    developer = HumanFactory()
    bind(developer, "tenant.developer", tenant_a)
    client = _login(developer)
    assert "provider-credentials" not in client.get(f"/t/{tenant_a.slug}/").content.decode()
    assert client.get(f"{_base(tenant_a)}/").status_code == 403


def test_a_key_posted_after_the_session_expired_is_not_kept_in_the_session(tenant_a) -> None:
    from frontend.views import RESUME_SESSION_KEY

    client = Client()
    page = f"http://testserver{_base(tenant_a)}/"
    for path, data in (
        ("new", {"new-secret-provider": "openai", "new-secret-api_key": SECRET}),
        ("anthropic/rotate", {"anthropic-secret-api_key": SECRET}),
    ):
        response = client.post(f"{_base(tenant_a)}/{path}", data, HTTP_REFERER=page)
        assert response.status_code == 302 and response["Location"].startswith("/login/")
        parked = client.session[RESUME_SESSION_KEY]
        assert parked["action"] == f"{_base(tenant_a)}/{path}"
        assert SECRET not in str(parked)


def test_the_page_costs_the_same_few_queries_with_one_key_or_three(admin_a, tenant_a) -> None:
    client = _login(admin_a)
    provider_credentials.provider_credential_set(
        tenant=tenant_a, actor=actor_for(admin_a), provider="anthropic", secret=SECRET
    )
    client.get(f"{_base(tenant_a)}/")  # warm the session and permission caches
    with CaptureQueriesContext(connection) as one:
        client.get(f"{_base(tenant_a)}/")
    for provider in ("openai", "deepseek"):
        provider_credentials.provider_credential_set(
            tenant=tenant_a, actor=actor_for(admin_a), provider=provider, secret=SECRET
        )
    with CaptureQueriesContext(connection) as three:
        response = client.get(f"{_base(tenant_a)}/")
    assert response.status_code == 200
    # Session, principal, tenant and access, the switcher, the keys (rotations included).
    assert len(three) == len(one) <= 7, [q["sql"][:120] for q in three.captured_queries]
