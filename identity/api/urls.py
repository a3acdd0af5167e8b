"""Identity platform routes."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from identity.api import views

router = SimpleRouter(trailing_slash=False, use_regex_path=False)
router.register(
    "platform/group-mappings", views.GroupMappingViewSet, basename="platform-group-mapping"
)
router.register("platform/invitations", views.InvitationViewSet, basename="platform-invitation")
router.register(
    "platform/principals/<uuid:pk>/sessions",
    views.PersonSessionViewSet,
    basename="platform-principal-session",
)
router.register("platform/scim-tokens", views.ScimTokenViewSet, basename="platform-scim-token")
# Only detail actions (disable, enable, sign-out, remove): the list of principals and the
# creation of one are tenants.api.views.PlatformPrincipalViewSet's.
router.register("platform/principals", views.PersonLifecycleViewSet, basename="platform-principal")

urlpatterns = router.urls
