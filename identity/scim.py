"""django-scim2 glue: the SCIM protocol is the library's, every change is our service's.

* ``ScimTokenMiddleware`` authenticates ``/scim/v2/`` calls by the SCIM bearer token
  (a session or an API key is never enough there) and audits each refusal
  (``identity.scim.authenticate``, failed, coalesced per source).
* ``ScimUserAdapter`` / ``ScimGroupAdapter`` turn SCIM JSON into calls of
  ``identity.services.scim`` (create, update, PATCH, delete), never a bare ``save()``.
* ``UserFilter`` / ``GroupFilter`` map the SCIM filter attributes the IdPs send
  (``userName``, ``externalId``, ``displayName``) to columns, for scim2-filter-parser.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django_scim import constants
from django_scim import exceptions as scim_errors
from django_scim.adapters import SCIMGroup, SCIMUser

from controlplane.errors import DomainError
from identity.models import ScimGroup, ScimToken
from identity.services import scim as services
from tenants.authentication import http_source
from tenants.models import Principal, PrincipalKind

SCIM_PREFIX = "/scim/v2/"


class ScimCaller(AnonymousUser):
    """``request.user`` on a SCIM call admitted by a token (no principal acts)."""

    def __init__(self, token: ScimToken) -> None:
        self.token = token

    @property
    def is_authenticated(self) -> bool:  # type: ignore[override]
        return True


def _bearer(request: HttpRequest) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


class ScimTokenMiddleware:
    """Resolve ``request.user`` on SCIM routes from the SCIM token only (see module)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(SCIM_PREFIX):
            token = services.scim_token_authenticate(_bearer(request))
            if token is None:
                _refusal_record(request)
                request.user = AnonymousUser()
            else:
                request.user = ScimCaller(token)
        return self.get_response(request)


def _refusal_record(request: HttpRequest) -> None:
    from audit.models import Outcome
    from tenants.actor import Actor, AuthMethod
    from tenants.services.failures import failure_coalesced_record

    source = http_source(request)
    presented = _bearer(request)
    failure_coalesced_record(
        kind="scim",
        actor=Actor(
            principal=None,
            auth_method=AuthMethod.SCIM,
            source_ip=source.ip,
            user_agent=source.user_agent,
        ),
        action="identity.scim.authenticate",
        outcome=Outcome.FAILED,
        target_type="scim_token",
        target_id="",
        details={
            "reason": "invalid_token" if presented else "missing_token",
            "presented_prefix": presented[:12],
            "path": request.path[:200],
        },
    )


def _actor(request: HttpRequest) -> Any:
    user = request.user
    if not isinstance(user, ScimCaller):  # the middleware admitted nobody else
        raise scim_errors.SCIMException("Not authenticated.", status=401)
    source = http_source(request)
    return services.scim_actor(token=user.token, source_ip=source.ip, user_agent=source.user_agent)


def _domain(call: Callable[[], Any]) -> Any:
    """Run a service call; a domain error becomes the SCIM error document."""
    try:
        return call()
    except DomainError as error:
        status = 409 if error.http_status == 409 else 400
        raise scim_errors.SCIMException(
            f"{error.message} ({error.code})",
            status=status,
            scim_type="uniqueness" if status == 409 else "invalidValue",
        ) from None


def _text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise scim_errors.BadRequestError(f"{field} must be a string.")
    return value


def extra_filter_kwargs(model: Any) -> Callable[..., dict[str, Any]]:
    """SCIM sees humans that are not removed, and every SCIM group."""

    def kwargs(request: HttpRequest, *args: Any, **kw: Any) -> dict[str, Any]:
        if model is Principal:
            return {"kind": PrincipalKind.HUMAN, "removed_at": None}
        return {}

    return kwargs


class ScimUserAdapter(SCIMUser):  # type: ignore[misc]  # django-scim2 ships no types
    obj: Any
    id_field = "id"

    def to_dict(self) -> dict[str, Any]:
        person = self.obj
        return {
            "schemas": [constants.SchemaURI.USER],
            "id": str(person.pk),
            "userName": person.username,
            "name": {
                "givenName": person.first_name,
                "familyName": person.last_name,
                "formatted": self.display_name,
            },
            "displayName": self.display_name,
            "emails": [{"value": person.email, "primary": True}] if person.email else [],
            "active": person.is_active,
            "groups": [
                {
                    "value": str(g.pk),
                    "display": g.display_name,
                    "$ref": ScimGroupAdapter(g, self.request).location,
                }
                for g in person.scim_groups.all()
            ],
            "meta": {
                "resourceType": self.resource_type,
                "created": person.date_joined.isoformat(),
                "lastModified": person.date_joined.isoformat(),
                "location": self.location,
            },
        }

    def _fields(self, d: dict[str, Any]) -> services.ScimUserFields:
        name = d.get("name") or {}
        if not isinstance(name, dict):
            raise scim_errors.BadRequestError("name must be an object.")
        emails = d.get("emails") or []
        email = ""
        if isinstance(emails, list) and emails:
            primary = [e for e in emails if isinstance(e, dict) and e.get("primary")] or emails
            email = _text(
                primary[0].get("value") if isinstance(primary[0], dict) else None, "email"
            )
            if email:
                self.validate_email(email)
        active = d.get("active", True)
        if not isinstance(active, bool):
            raise scim_errors.BadRequestError("active must be true or false.")
        return services.ScimUserFields(
            username=_text(d.get("userName"), "userName").strip(),
            email=email,
            first_name=_text(name.get("givenName"), "givenName"),
            last_name=_text(name.get("familyName"), "familyName"),
            active=active,
            external_id=_text(d.get("externalId"), "externalId"),
        )

    def from_dict(self, d: dict[str, Any]) -> None:
        self._pending = self._fields(d)

    def save(self) -> None:
        actor, fields = _actor(self.request), self._pending
        if self.obj.pk is None or not Principal.objects.filter(pk=self.obj.pk).exists():
            self.obj = _domain(lambda: services.scim_user_create(actor=actor, fields=fields))
        else:
            self.obj = _domain(
                lambda: services.scim_user_update(actor=actor, person=self.obj, fields=fields)
            )

    def delete(self) -> None:
        actor = _actor(self.request)
        _domain(lambda: services.scim_user_delete(actor=actor, person=self.obj))

    def handle_operations(self, operations: list[dict[str, Any]]) -> None:
        """PATCH add / replace of ``active``, ``userName``, names and e-mails (what Okta
        and Entra ID send), applied as one update through the services."""
        current = self.to_dict()
        for operation in operations:
            if not isinstance(operation, dict):
                raise scim_errors.BadRequestError("Each operation is an object.")
            op = str(operation.get("op", "")).lower()
            if op not in ("add", "replace"):
                raise scim_errors.BadRequestError(f"Unsupported PATCH op {op!r} on a user.")
            path, value = operation.get("path"), operation.get("value")
            changes = {str(path): value} if path else value
            if not isinstance(changes, dict):
                raise scim_errors.BadRequestError("A PATCH value without a path is an object.")
            for attr, new in changes.items():
                _user_attr_apply(current, attr, new)
        self.from_dict(current)
        self.save()


def _user_attr_apply(current: dict[str, Any], attr: str, new: Any) -> None:
    key = attr.split(":")[-1] if attr.startswith("urn:") else attr
    base = key.split("[")[0].split(".")[0]
    if base == "active":
        current["active"] = new.lower() == "true" if isinstance(new, str) else new
    elif base == "userName":
        current["userName"] = new
    elif key in ("name.givenName", "givenName"):
        current.setdefault("name", {})["givenName"] = new
    elif key in ("name.familyName", "familyName"):
        current.setdefault("name", {})["familyName"] = new
    elif base == "name" and isinstance(new, dict):
        current["name"] = {**current.get("name", {}), **new}
    elif base == "emails":
        current["emails"] = new if isinstance(new, list) else [{"value": new, "primary": True}]
    elif base in ("externalId", "displayName", "name", "title", "locale", "timezone"):
        return  # not kept here
    else:
        raise scim_errors.BadRequestError(f"Unsupported attribute {attr[:60]!r}.")


def _members(value: Any) -> list[Principal]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise scim_errors.BadRequestError("members is a list of {value: id} objects.")
    ids = [str(m.get("value") or "") for m in value]
    found = {str(p.pk): p for p in services.scim_people().filter(pk__in=_uuids(ids))}
    missing = [i for i in ids if i not in found]
    if missing:
        raise scim_errors.BadRequestError(f"Unknown member(s): {', '.join(missing[:5])}.")
    return [found[i] for i in ids]


def _uuids(ids: list[str]) -> list[str]:
    import uuid

    out = []
    for value in ids:
        try:
            out.append(str(uuid.UUID(value)))
        except ValueError:
            continue
    return out


class ScimGroupAdapter(SCIMGroup):  # type: ignore[misc]  # django-scim2 ships no types
    obj: Any
    id_field = "id"

    @property
    def display_name(self) -> str:
        return str(self.obj.display_name)

    @property
    def members(self) -> list[dict[str, Any]]:
        return [
            {"value": str(p.pk), "display": p.username}
            for p in self.obj.members.filter(removed_at__isnull=True).order_by("username")
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schemas": [constants.SchemaURI.GROUP],
            "id": str(self.obj.pk),
            "externalId": self.obj.external_id or None,
            "displayName": self.obj.display_name,
            "members": self.members,
            "meta": {
                "resourceType": self.resource_type,
                "created": self.obj.created_at.isoformat(),
                "lastModified": self.obj.updated_at.isoformat(),
                "location": self.location,
            },
        }

    def from_dict(self, d: dict[str, Any]) -> None:
        self._pending = (
            _text(d.get("displayName"), "displayName"),
            _text(d.get("externalId"), "externalId"),
            _members(d["members"]) if "members" in d else None,
        )

    def save(self) -> None:
        actor = _actor(self.request)
        name, external, members = self._pending
        existing = (
            self.obj if self.obj.pk and ScimGroup.objects.filter(pk=self.obj.pk).exists() else None
        )
        self.obj = _domain(
            lambda: services.scim_group_save(
                actor=actor,
                group=existing,
                display_name=name,
                external_id=external,
                members=members if members is not None or existing else [],
            )
        )

    def delete(self) -> None:
        actor = _actor(self.request)
        _domain(lambda: services.scim_group_delete(actor=actor, group=self.obj))

    def handle_operations(self, operations: list[dict[str, Any]]) -> None:
        """PATCH: add / remove members (``members`` or ``members[value eq "id"]``),
        replace ``displayName`` or ``members``; one service call per operation."""
        actor = _actor(self.request)
        for operation in operations:
            if not isinstance(operation, dict):
                raise scim_errors.BadRequestError("Each operation is an object.")
            op = str(operation.get("op", "")).lower()
            path = str(operation.get("path") or "")
            value: Any = operation.get("value")
            if op not in ("add", "remove", "replace"):
                raise scim_errors.BadRequestError(f"Unknown PATCH op {op!r}.")
            if path.startswith("members[") and op == "remove":
                inner = path[len("members[") :].rstrip("]")
                member_id = inner.partition('"')[2].rpartition('"')[0]
                value, path = [{"value": member_id}], "members"
            if path == "members" or (not path and isinstance(value, dict) and "members" in value):
                listed = _members(value if path else value["members"])
                group = self.obj
                if op == "replace":
                    self.obj = _domain(
                        partial(
                            services.scim_group_save,
                            actor=actor,
                            group=group,
                            display_name=group.display_name,
                            external_id=group.external_id,
                            members=listed,
                        )
                    )
                else:
                    add, drop = (listed, []) if op == "add" else ([], listed)
                    self.obj = _domain(
                        partial(
                            services.scim_group_members_change,
                            actor=actor,
                            group=group,
                            add=add,
                            remove=drop,
                        )
                    )
            elif path == "displayName" or (not path and isinstance(value, dict)):
                name = value if path else value.get("displayName", self.obj.display_name)
                group = self.obj
                self.obj = _domain(
                    partial(
                        services.scim_group_save,
                        actor=actor,
                        group=group,
                        display_name=_text(name, "displayName"),
                        external_id=group.external_id,
                    )
                )
            else:
                raise scim_errors.BadRequestError(f"Unsupported PATCH path {path!r}.")
