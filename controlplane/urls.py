"""URL routes. Tenant routes live under /api/v1/tenants/{tenant}/, platform routes under
/api/v1/platform/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from controlplane import health, metrics

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="prometheus-metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("controlplane.api.urls")),
    # SCIM 2.0 provisioning by the IdP (django-scim2; identity.scim authenticates).
    path("scim/v2/", include("django_scim.urls", namespace="scim")),
    path("", include("frontend.urls")),
]

handler400 = "controlplane.views.bad_request"
handler404 = "controlplane.views.not_found"
handler500 = "controlplane.views.server_error"
