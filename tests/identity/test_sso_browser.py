"""Single sign-on in Chromium: the console, the real provider's login page, and back.

The full authorization-code flow with PKCE as a person goes through it: the console's
"Sign in with" button, the provider's own login form, the callback, the tenant page the
group mapping opened. Every console page is checked for console errors and with axe (the
provider's page is not ours and is not checked).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from audit.models import AuditEvent
from identity.services.mappings import group_mapping_create
from tenants.models import Principal
from tests.factories import HumanFactory, TenantFactory, actor_for, bind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_person_signs_in_with_the_idp_in_a_browser_and_lands_on_the_mapped_tenant(
    console, live_server_url, idp
) -> None:
    admin = HumanFactory(username="ops")
    bind(admin, "platform.admin", None)
    legal = TenantFactory(slug="acme-legal", display_name="Acme Legal")
    group_mapping_create(
        actor=actor_for(admin), tenant=legal, group="ml-legal-admins", role="tenant.admin"
    )
    authorizations: list[str] = []
    console.page.on(
        "request",
        lambda r: authorizations.append(r.url) if r.url.startswith(idp.issuer + "/auth") else None,
    )

    console.go("/login/")
    console.check()
    console.click("#sso-login")
    console.wait_for_url(re.compile(re.escape(idp.issuer) + r"/interaction/.*"))
    console.fill("input[name=login]", "alice")
    console.fill("input[name=password]", "any password")
    console.errors.clear()  # the provider's page loads web fonts it cannot reach here
    console.click("button[type=submit]")
    console.wait_for_url(re.compile(re.escape(live_server_url) + r"/t/acme-legal/$"))
    console.errors.clear()
    console.page.reload()
    console.check()

    query = parse_qs(urlsplit(authorizations[0]).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    assert query["response_type"] == ["code"] and query["state"][0] and query["nonce"][0]
    assert "alice@example.com" in console.locator(".who").inner_text()
    alice = Principal.objects.get(username="alice@example.com")
    assert alice.bindings.get().role.name == "tenant.admin"
    assert AuditEvent.objects.filter(
        action="identity.oidc.login", actor_id=alice.pk, outcome="success"
    ).exists()


def test_a_person_without_a_mapped_group_sees_the_no_access_page_in_the_browser(
    console, live_server_url, idp
) -> None:
    TenantFactory(slug="acme-legal")
    console.go("/login/")
    console.click("#sso-login")
    console.wait_for_url(re.compile(re.escape(idp.issuer) + r"/interaction/.*"))
    console.fill("input[name=login]", "carol")
    console.fill("input[name=password]", "any password")
    console.click("button[type=submit]")
    console.locator("#sso-refused").wait_for()
    console.errors.clear()  # the provider's page loads web fonts it cannot reach here

    assert console.locator("#sso-refused").get_attribute("data-reason") == "no_access"
    assert "No access" in console.locator("h1").inner_text()
    console.check()
    console.go("/")
    assert console.page.url.startswith(live_server_url + "/login/")
