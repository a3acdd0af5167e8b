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
        views.InvitationViewSet.as_view({"post": "create"}),
        name="platform-invitation-list",
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
