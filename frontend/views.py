"""Console views: thin adapters over selectors."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from tenants.models import Tenant


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """Landing page of the console."""
    tenants = Tenant.objects.all() if request.user.is_superuser else Tenant.objects.none()
    return render(request, "frontend/overview.html", {"tenants": tenants})
