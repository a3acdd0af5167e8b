"""Identity platform routes."""

from __future__ import annotations

from django.urls import path

from identity.api import views

urlpatterns = [
    path(
        "platform/group-mappings",
        views.GroupMappingViewSet.as_view({"get": "list", "post": "create"}),
        name="platform-group-mapping-list",
    ),
    path(
        "platform/group-mappings/<uuid:pk>",
        views.GroupMappingViewSet.as_view({"delete": "destroy"}),
        name="platform-group-mapping-detail",
    ),
    path(
        "platform/invitations",
        views.InvitationViewSet.as_view({"get": "list", "post": "create"}),
        name="platform-invitation-list",
    ),
    path(
        "platform/invitations/<uuid:pk>/revoke",
        views.InvitationViewSet.as_view({"post": "revoke"}),
        name="platform-invitation-revoke",
    ),
    path(
        "platform/principals/<uuid:pk>/sessions",
        views.PersonSessionViewSet.as_view({"get": "list"}),
        name="platform-principal-sessions",
    ),
    path(
        "platform/principals/<uuid:pk>/sessions/<str:session_id>",
        views.PersonSessionViewSet.as_view({"delete": "destroy"}),
        name="platform-principal-session",
    ),
    path(
        "platform/scim-tokens",
        views.ScimTokenViewSet.as_view({"get": "list", "post": "create"}),
        name="platform-scim-token-list",
    ),
    path(
        "platform/scim-tokens/<uuid:pk>",
        views.ScimTokenViewSet.as_view({"delete": "destroy"}),
        name="platform-scim-token-detail",
    ),
    *(
        path(
            f"platform/principals/<uuid:pk>/{verb}",
            views.PersonLifecycleViewSet.as_view({"post": action}),
            name=f"platform-principal-{verb}",
        )
        for verb, action in (
            ("disable", "disable"),
            ("enable", "enable"),
            ("sign-out", "sign_out"),
            ("remove", "remove"),
        )
    ),
]
