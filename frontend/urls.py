"""Console pages."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import views

urlpatterns = [
    path("", views.home, name="console-overview"),
    path("platform/", views.platform_overview, name="console-platform"),
    path("platform/workers/", views.workers_page, name="console-workers"),
    path("t/<slug:tenant>/", views.tenant_overview, name="console-tenant"),
    path("t/<slug:tenant>/caches/<uuid:cache_id>/", views.cache_page, name="console-cache"),
    path("t/<slug:tenant>/audit/", views.audit_page, name="console-audit"),
    path("t/<slug:tenant>/break-even/", views.breakeven_page, name="console-breakeven"),
    path("login/", auth_views.LoginView.as_view(template_name="frontend/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="/login/"), name="logout"),
]
