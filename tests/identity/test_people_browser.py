"""The invitation form and a person's sessions page in Chromium, checked with axe.

``console.check()`` fails on console errors and serious/critical axe findings; these
pages are also held to zero axe violations of any impact.
"""

from __future__ import annotations

import pytest

from identity.models import Invitation
from tenants.models import Principal, RoleBinding
from tests.factories import HumanFactory, TenantFactory, bind
from tests.frontend.conftest import PASSWORD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _no_axe_violations(console) -> None:
    console.check()
    found = console.page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => v.id + ': ' + v.nodes.slice(0, 2).map(n => n.target.join(' ')).join(', '))"
    )
    assert found == [], f"axe on {console.page.url}: {found}"


def test_a_platform_admin_invites_with_a_role_lists_and_revokes_in_the_browser(console) -> None:
    ops = HumanFactory(username="ops", password=PASSWORD)
    bind(ops, "platform.admin", None)
    TenantFactory(slug="acme-legal")
    console.login("ops")

    console.go("/platform/invitations/")
    _no_axe_violations(console)
    console.fill("#id_username", "erin")
    console.fill("#id_email", "erin@example.com")
    console.select_option("#id_tenant_1", "acme-legal")
    console.select_option("#id_role_1", "tenant.developer")
    console.click("#invitation-form button[type=submit]")
    console.locator('tr[data-invitation="erin"]').wait_for()
    _no_axe_violations(console)
    erin = Principal.objects.get(username="erin")
    assert RoleBinding.objects.get(principal=erin).role.name == "tenant.developer"

    console.click('tr[data-invitation="erin"] button.danger')  # the confirm is accepted
    console.locator("#invitations-table").get_by_text("No pending invitation.").wait_for()
    assert Invitation.objects.get().revoked_at is not None


def test_a_platform_admin_signs_one_of_a_persons_sessions_out_in_the_browser(
    console, browser, live_server_url
) -> None:
    ops = HumanFactory(username="ops", password=PASSWORD)
    bind(ops, "platform.admin", None)
    dana = HumanFactory(username="dana", password=PASSWORD)
    bind(dana, "tenant.developer", TenantFactory(slug="acme-legal"))
    from tests.frontend.conftest import ConsolePage

    other = browser.new_context()
    danas = ConsolePage(other.new_page(), live_server_url)
    danas.login("dana")
    console.login("ops")

    console.go(f"/platform/people/{dana.pk}/sessions/")
    _no_axe_violations(console)
    assert console.locator("#sessions-table tbody tr[data-session]").count() == 1
    console.click("#sessions-table button.danger")
    console.locator("#sessions-table").get_by_text("No open session.").wait_for()
    _no_axe_violations(console)
    danas.go("/")
    assert "/login/" in danas.page.url
    other.close()
