"""Provider keys in a real browser (Playwright driving Debian's Chromium, the real ASGI
stack under uvicorn): a tenant admin adds a key, sees only its fingerprint, rotates it and
removes it, a bad key is refused next to its field, and no page or response carries the
key; a viewer sees the keys without a form and its posts are refused and audited. Every
page is checked for console errors and with axe (``ConsolePage.check``)."""

from __future__ import annotations

import hashlib

import pytest

from audit.models import AuditEvent
from tests.frontend.browser_helpers import acme_with_admin, user_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SECRET = "sk-ant-browser-secret-0123456789"
ROTATED = "sk-ant-browser-rotated-9876543210"
TYPO = "sk-ant has-a-space-0123"


def _fingerprint(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def _no_key_in(console, *bodies: str) -> None:
    """Neither key in the page as drawn, in the page's HTML as served, nor in ``bodies``."""
    served = console.evaluate("async () => await (await fetch(location.href)).text()")
    for text in (console.content(), served, *bodies):
        for secret in (SECRET, ROTATED, TYPO):
            assert secret not in text


def _actions(tenant) -> list[str]:
    return list(
        AuditEvent.objects.filter(
            tenant=tenant,
            target_type="provider_credential",
            outcome="success",
            auth_method="session",
        )
        .order_by("seq")
        .values_list("action", flat=True)
    )


def test_a_tenant_admin_adds_rotates_and_removes_a_provider_key_that_never_shows(
    console,
) -> None:
    from gateway.models import ProviderCredential

    tenant, admin = acme_with_admin()
    console.login(admin.username)
    console.go("/t/acme/")
    console.locator("nav.subnav a", has_text="Provider keys").click()
    console.wait_for_load_state()
    assert console.url.endswith("/t/acme/provider-credentials/")
    assert "No provider keys" in console.locator("#provider-credentials-table").inner_text()
    console.check()

    # A bad key: refused next to its field in plain words (and its code), a 400, not
    # echoed back, nothing written.
    form = console.locator("#provider-credential-form")
    form.locator("[name=new-secret-provider]").select_option("anthropic")
    form.locator("[name=new-secret-api_key]").fill(TYPO)
    with console.expect_response(lambda r: r.url.endswith("/provider-credentials/new")) as info:
        form.locator("button[type=submit]").click()
    assert info.value.status == 400
    refused = info.value.text()
    error = console.locator(".field.has-error:has([name=new-secret-api_key]) .field-error")
    assert "API key must not contain spaces or control characters." in error.inner_text()
    assert "invalid_provider_credential" in error.inner_text()
    assert console.locator("[name=new-secret-api_key]").input_value() == ""
    assert not ProviderCredential.objects.filter(tenant=tenant).exists()
    _no_key_in(console, refused)
    console.errors.clear()  # the 400 itself
    console.check()

    # Added: the row shows the provider and the key's fingerprint, never the key.
    form.locator("[name=new-secret-provider]").select_option("anthropic")
    form.locator("[name=new-secret-api_key]").fill(SECRET)
    form.locator("button[type=submit]").click()
    console.wait_for_load_state()
    assert "Anthropic key added" in console.locator(".flash").inner_text()
    row = console.locator("tr[data-provider=anthropic]")
    assert row.locator(".fingerprint").inner_text() == _fingerprint(SECRET)
    assert "never" in row.locator(".rotated").inner_text()
    assert "on" == row.locator(".autopilot").inner_text()
    assert "anthropic" not in [
        o.get_attribute("value") for o in console.locator("[name=new-secret-provider] option").all()
    ]  # one key per provider: only the others can be added
    _no_key_in(console)
    console.check()

    # Rotated: the new key replaces the old one; the row shows its fingerprint and when.
    rotate = console.locator("details[data-rotate=anthropic]")
    rotate.locator("summary").click()
    rotate.locator("[name=anthropic-secret-api_key]").fill(ROTATED)
    rotate.locator("button", has_text="Rotate key").click()
    console.wait_for_load_state()
    assert "Anthropic key rotated" in console.locator(".flash").inner_text()
    row = console.locator("tr[data-provider=anthropic]")
    assert row.locator(".fingerprint").inner_text() == _fingerprint(ROTATED)
    assert "never" not in row.locator(".rotated").inner_text()
    assert _fingerprint(SECRET) not in console.content()
    _no_key_in(console)
    console.check()

    # Removed (after the confirmation, which ConsolePage accepts).
    row.locator("button.credential-remove").click()
    console.wait_for_load_state()
    assert "Anthropic key removed" in console.locator(".flash").inner_text()
    assert console.locator("tr[data-provider=anthropic]").count() == 0
    assert not ProviderCredential.objects.filter(tenant=tenant).exists()
    _no_key_in(console)
    console.check()
    assert _actions(tenant) == [
        "gateway.provider_credential.set",
        "gateway.provider_credential.rotate",
        "gateway.provider_credential.delete",
    ]
    audited = str(list(AuditEvent.objects.values("changes", "details")))
    assert SECRET not in audited and ROTATED not in audited


def test_a_viewer_sees_the_fingerprints_without_forms_and_its_posts_are_refused_and_audited(
    console,
) -> None:
    from gateway import provider_credentials
    from gateway.models import ProviderCredential
    from tests.factories import actor_for

    tenant, admin = acme_with_admin()
    provider_credentials.provider_credential_set(
        tenant=tenant, actor=actor_for(admin), provider="openai", secret=SECRET
    )
    before = list(ProviderCredential.objects.filter(tenant=tenant).values())
    viewer = user_create("acme-viewer", "tenant.viewer", tenant)
    console.login(viewer.username)
    console.go("/t/acme/")
    console.locator("nav.subnav a", has_text="Provider keys").click()
    console.wait_for_load_state()
    row = console.locator("tr[data-provider=openai]")
    assert row.locator(".fingerprint").inner_text() == _fingerprint(SECRET)
    assert console.locator("#content form").count() == 0
    assert console.locator("#provider-credential-form, details[data-rotate]").count() == 0
    _no_key_in(console)
    console.check()
    statuses = console.evaluate(
        """async () => {
        const csrf = document.cookie.match(/csrftoken=([^;]+)/)[1];
        const post = async (path, fields) => (await fetch(path, {
            method: 'POST', body: new URLSearchParams({...fields, csrfmiddlewaretoken: csrf})
        })).status;
        const key = 'sk-ant-sneaky-1234';
        return [
            await post('/t/acme/provider-credentials/new',
                       {'new-secret-provider': 'anthropic', 'new-secret-api_key': key}),
            await post('/t/acme/provider-credentials/openai/rotate',
                       {'openai-secret-api_key': key}),
            await post('/t/acme/provider-credentials/openai/autopilot', {cache_autopilot: 'off'}),
            await post('/t/acme/provider-credentials/openai/remove', {}),
        ]; }"""
    )
    assert statuses == [403, 403, 403, 403]
    denied = AuditEvent.objects.filter(
        tenant=tenant, outcome="denied", actor_id=str(viewer.pk), action="frontend.page.view"
    )
    assert {e.target_id for e in denied} >= {
        "/t/acme/provider-credentials/new",
        "/t/acme/provider-credentials/openai/rotate",
        "/t/acme/provider-credentials/openai/autopilot",
        "/t/acme/provider-credentials/openai/remove",
    }
    assert list(ProviderCredential.objects.filter(tenant=tenant).values()) == before
