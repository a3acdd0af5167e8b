"""SCIM filter attributes → columns, for scim2-filter-parser (django-scim2's filters).

Apart from ``identity.scim`` because django-scim2 reads these classes while its adapter
module is being imported.
"""

from __future__ import annotations

from django_scim.filters import FilterQuery

from identity.models import ScimGroup
from tenants.models import Principal


class UserFilter(FilterQuery):  # type: ignore[misc]  # django-scim2 ships no types
    model_getter = staticmethod(lambda: Principal)
    attr_map = {
        ("userName", None, None): "username",
        ("emails", "value", None): "email",
        ("active", None, None): "is_active",
        ("name", "givenName", None): "first_name",
        ("name", "familyName", None): "last_name",
        ("externalId", None, None): "username",
    }


class GroupFilter(FilterQuery):  # type: ignore[misc]
    model_getter = staticmethod(lambda: ScimGroup)
    attr_map = {
        ("displayName", None, None): "display_name",
        ("externalId", None, None): "external_id",
    }
