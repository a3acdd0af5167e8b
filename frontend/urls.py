"""Console pages and the form posts that manage the platform from the browser."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import (
    views,
    views_access,
    views_account,
    views_history,
    views_identity,
    views_keys,
    views_limits,
    views_login,
    views_manage,
    views_people,
    views_platform,
    views_provider_credentials,
    views_requests,
)

T = "t/<slug:tenant>"

urlpatterns = [
    path("", views.home, name="console-overview"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("platform/", views.platform_overview, name="console-platform"),
    path("platform/workers/", views_platform.workers_page, name="console-workers"),
    path(
        "platform/workers/register", views_platform.worker_register, name="console-worker-register"
    ),
    path(
        "platform/workers/<str:name>/drain",
        views_platform.worker_drain,
        name="console-worker-drain",
    ),
    path(
        "platform/workers/<str:name>/remove",
        views_platform.worker_remove,
        name="console-worker-remove",
    ),
    path("platform/audit/", views_history.platform_audit, name="console-platform-audit"),
    path(
        "platform/history/<str:target_type>/<str:target_id>/",
        views_history.platform_object_history,
        name="console-platform-history",
    ),
    path(
        f"{T}/history/<str:target_type>/<str:target_id>/",
        views_history.object_history,
        name="console-history",
    ),
    path("platform/tenants/", views_platform.tenants_page, name="console-tenants"),
    path("platform/tenants/new", views_platform.tenant_create, name="console-tenant-create"),
    path(
        "platform/tenants/<slug:slug>/rename",
        views_platform.tenant_rename,
        name="console-tenant-rename",
    ),
    path(
        "platform/tenants/<slug:slug>/suspend",
        views_platform.tenant_suspend,
        name="console-tenant-suspend",
    ),
    path(
        "platform/tenants/<slug:slug>/resume",
        views_platform.tenant_resume,
        name="console-tenant-resume",
    ),
    path("platform/people/new", views_platform.human_create, name="console-human-create"),
    path("platform/sso/", views_identity.sso_page, name="console-sso"),
    path("platform/invitations/", views_people.invitations_page, name="console-invitations"),
    path(
        "platform/invitations/new",
        views_people.invitation_create,
        name="console-invitation-create",
    ),
    path(
        "platform/invitations/<str:invitation_id>/revoke",
        views_people.invitation_revoke,
        name="console-invitation-revoke",
    ),
    path(
        "platform/people/<str:principal_id>/sessions/",
        views_people.person_sessions_page,
        name="console-person-sessions",
    ),
    path(
        "platform/people/<str:principal_id>/sessions/<str:session_id>/end",
        views_people.person_session_end,
        name="console-person-session-end",
    ),
    path(
        "platform/people/<str:principal_id>/<str:verb>",
        views_identity.person_action,
        name="console-person-action",
    ),
    path(
        "platform/sso/mappings/new",
        views_identity.group_mapping_create,
        name="console-group-mapping-create",
    ),
    path(
        "platform/sso/mappings/<str:mapping_id>/delete",
        views_identity.group_mapping_delete,
        name="console-group-mapping-delete",
    ),
    path("platform/prices/", views_platform.prices_page, name="console-prices"),
    path("platform/prices/new", views_platform.price_create, name="console-price-create"),
    path(
        "platform/prices/<int:price_id>/correct",
        views_platform.price_correct,
        name="console-price-correct",
    ),
    path(
        "platform/prices/pools/new",
        views_platform.pool_price_create,
        name="console-pool-price-create",
    ),
    path(
        "platform/prices/pools/<int:price_id>/correct",
        views_platform.pool_price_correct,
        name="console-pool-price-correct",
    ),
    path(f"{T}/", views.tenant_overview, name="console-tenant"),
    path(f"{T}/caches/new/", views_manage.cache_new, name="console-cache-new"),
    path(f"{T}/caches/<uuid:cache_id>/", views.cache_page, name="console-cache"),
    path(
        f"{T}/caches/<uuid:cache_id>/extend", views_manage.cache_extend, name="console-cache-extend"
    ),
    path(f"{T}/caches/<uuid:cache_id>/ttl", views_manage.cache_set_ttl, name="console-cache-ttl"),
    path(
        f"{T}/caches/<uuid:cache_id>/policy", views_manage.cache_policy, name="console-cache-policy"
    ),
    path(f"{T}/caches/<uuid:cache_id>/evict", views_manage.cache_evict, name="console-cache-evict"),
    path(f"{T}/access/", views_access.access_page, name="console-access"),
    path(f"{T}/access/policy", views_access.policy_save, name="console-policy-save"),
    path(f"{T}/access/members", views_access.member_add, name="console-member-add"),
    path(
        f"{T}/access/service-accounts",
        views_access.service_account_create,
        name="console-sa-create",
    ),
    path(f"{T}/access/roles", views_access.role_create, name="console-role-create"),
    path(f"{T}/keys/", views_keys.keys_page, name="console-keys"),
    path(f"{T}/keys/new", views_keys.key_create, name="console-key-create"),
    path(f"{T}/keys/<str:key_id>/revoke", views_keys.key_revoke, name="console-key-revoke"),
    path(f"{T}/keys/<str:key_id>/rotate", views_keys.key_rotate, name="console-key-rotate"),
    path(f"{T}/budgets/", views_manage.budgets_page, name="console-budgets"),
    path(f"{T}/budgets/new", views_manage.budget_create, name="console-budget-create"),
    path(f"{T}/budgets/<str:budget_id>/edit", views_manage.budget_edit, name="console-budget-edit"),
    path(
        f"{T}/budgets/<str:budget_id>/archive",
        views_manage.budget_archive,
        name="console-budget-archive",
    ),
    path(
        f"{T}/budgets/<str:budget_id>/rotate-secret",
        views_manage.budget_rotate_secret,
        name="console-budget-rotate",
    ),
    path(f"{T}/rate-limits/new", views_limits.rate_limit_create, name="console-rate-limit-create"),
    path(
        f"{T}/rate-limits/<str:limit_id>/edit",
        views_limits.rate_limit_edit,
        name="console-rate-limit-edit",
    ),
    path(
        f"{T}/rate-limits/<str:limit_id>/delete",
        views_limits.rate_limit_delete,
        name="console-rate-limit-delete",
    ),
    path(
        f"{T}/provider-credentials/",
        views_provider_credentials.provider_credentials_page,
        name="console-provider-credentials",
    ),
    path(
        f"{T}/provider-credentials/new",
        views_provider_credentials.provider_credential_add,
        name="console-provider-credential-add",
    ),
    path(
        f"{T}/provider-credentials/<str:provider>/rotate",
        views_provider_credentials.provider_credential_rotate,
        name="console-provider-credential-rotate",
    ),
    path(
        f"{T}/provider-credentials/<str:provider>/autopilot",
        views_provider_credentials.provider_credential_autopilot,
        name="console-provider-credential-autopilot",
    ),
    path(
        f"{T}/provider-credentials/<str:provider>/remove",
        views_provider_credentials.provider_credential_remove,
        name="console-provider-credential-remove",
    ),
    path(f"{T}/audit/", views.audit_page, name="console-audit"),
    path(f"{T}/requests/", views_requests.request_log, name="console-requests"),
    path(f"{T}/break-even/", views.breakeven_page, name="console-breakeven"),
    path("login/", views_login.ConsoleLoginView.as_view(), name="login"),
    path("login/sso/", views_login.sso_start, name="sso-start"),
    path("login/sso/callback/", views_login.sso_callback, name="sso-callback"),
    path("account/password/", views_account.PasswordChange.as_view(), name="password_change"),
    path(
        "account/password/done/",
        views_account.PasswordChangeDone.as_view(),
        name="password_change_done",
    ),
    path("password-reset/", views_account.PasswordReset.as_view(), name="password_reset"),
    path(
        "password-reset/done/",
        views_account.PasswordResetDone.as_view(),
        name="password_reset_done",
    ),
    path(
        "reset/<uidb64>/<token>/",
        views_account.PasswordResetConfirm.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "reset/done/",
        views_account.PasswordResetComplete.as_view(),
        name="password_reset_complete",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="/login/"), name="logout"),
]
