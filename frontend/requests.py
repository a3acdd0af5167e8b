"""What a console view may rely on about its request, as types.

``login_required`` guarantees a signed-in principal; ``tenant_page`` (``frontend.views``)
also sets the tenant the URL names and the permissions held there, ``platform_page`` the
platform permissions held. Views annotate ``request`` with the class their decorator
guarantees; the decorators are the only code that sets these attributes.
"""

from __future__ import annotations

from django.http import HttpRequest

from tenants.models import Principal, Tenant


class ConsoleRequest(HttpRequest):
    """A request of a signed-in principal (behind ``login_required``)."""

    user: Principal


class TenantPageRequest(ConsoleRequest):
    """A request admitted by ``tenant_page``: the URL's tenant and the permissions held."""

    tenant: Tenant
    held: frozenset[str]


class PlatformPageRequest(ConsoleRequest):
    """A request admitted by ``platform_page``: no tenant, the platform permissions held."""

    tenant: None
    held: frozenset[str]
