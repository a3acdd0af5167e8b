"""Fail-closed tenancy in the ORM: a tenant-owned model refuses a query that names no tenant.

Tenant-owned models declare ``objects = TenantScopedManager()``. Their querysets check,
when they are evaluated (iterated, counted, updated, deleted...), that the query's WHERE
clause names a tenant: ``tenant=`` / ``tenant_id=`` / ``tenant__slug=``, or a tenant-owned
parent (``cache=<cache>``, ``cache__tenant=``). A related manager of a tenant (or of a
tenant-owned parent) is scoped by construction (``tenant.caches.all()``,
``cache.operations.all()``). A query that names none raises ``TenantScopeRequired``, so a
forgotten filter is an exception in tests, not a leak in production.

Platform code that must span tenants (reconciliation, billing rollups, admin, a task that
loads its row by id) says so with the greppable escape hatch ``.all_tenants()``, each use
with a comment saying why (``grep -rn all_tenants`` lists every cross-tenant read).

This is a guardrail against forgetting, not a sandbox: ``filter(Q(tenant=t) | Q(...))``
passes the check. Django's internals (deletion collector, forward relations,
``refresh_from_db``) use the plain base manager and are not affected; migrations use
historical models and are not affected either.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Self, TypeVar

from django.db import models
from django.db.models.expressions import Col

_M = TypeVar("_M", bound=models.Model, covariant=True)


class TenantScopeRequired(RuntimeError):
    """A query on a tenant-owned model named no tenant (a programming error)."""

    def __init__(self, model: type[models.Model]) -> None:
        name = model.__name__
        super().__init__(
            f"{name} is tenant-owned and this query names no tenant. Scope it: "
            f"{name}.objects.filter(tenant=...) (or tenant_id=, or through a tenant-owned "
            f"parent such as cache=<obj> / cache__tenant=...), or use a related manager of "
            f"a tenant instance (tenant.<related_name>.all()). Platform code that must span "
            f"tenants (reconcile, rollups, admin, a task loading its row by id) calls "
            f"{name}.objects.all_tenants() with a comment saying why."
        )
        self.model = model


def is_tenant_owned(model: type[models.Model] | None) -> bool:
    """Whether ``model``'s default manager is fail-closed (it declares tenant scoping)."""
    manager = getattr(model, "_default_manager", None) if model is not None else None
    return isinstance(manager, TenantScopedManager)


def _columns(node: Any) -> Iterator[Col]:
    """Every column a WHERE tree refers to (through lookups, transforms, functions)."""
    if isinstance(node, Col):
        yield node
        return
    for child in getattr(node, "children", ()) or ():
        yield from _columns(child)
    for attr in ("lhs", "rhs"):
        part = getattr(node, attr, None)
        if part is not None and hasattr(part, "get_source_expressions"):
            yield from _columns(part)
    if not hasattr(node, "children") and hasattr(node, "get_source_expressions"):
        for expression in node.get_source_expressions():
            if expression is not None:
                yield from _columns(expression)


#: The tenant model, by label: tenants.models imports this module for its manager, so
#: this module names the model instead of importing it.
TENANT_MODEL_LABEL = "tenants.tenant"


def _is_tenant_model(model: Any) -> bool:
    meta = getattr(model, "_meta", None)
    return meta is not None and meta.label_lower == TENANT_MODEL_LABEL


def _names_a_tenant(query: Any) -> bool:
    for column in _columns(query.where):
        field = column.target
        if _is_tenant_model(field.model):
            return True  # tenant__slug=..., a join to the tenant row
        related = getattr(field, "related_model", None)
        if field.is_relation and (_is_tenant_model(related) or is_tenant_owned(related)):
            return True  # tenant=, tenant_id=, cache=, cache__tenant=...
    return False


class TenantScopedQuerySet(models.QuerySet[_M]):
    """A queryset that refuses to run unscoped; see the module docstring."""

    _all_tenants = False

    def all_tenants(self) -> Self:
        """ESCAPE HATCH: a query that spans tenants on purpose (platform code only).

        Every call site carries a comment saying why it may read across tenants.
        """
        clone = self.all()  # a copy, as QuerySet._chain() makes it
        clone._all_tenants = True
        return clone

    def _clone(self) -> Self:
        # QuerySet._clone is private Django API that django-stubs does not declare.
        clone: Self = super()._clone()  # type: ignore[misc]
        clone._all_tenants = self._all_tenants
        return clone

    def _require_scope(self) -> None:
        if self._all_tenants or self.query.is_empty():
            return
        if not _names_a_tenant(self.query):
            raise TenantScopeRequired(self.model)

    def __repr__(self) -> str:
        if self._result_cache is None and not self._all_tenants and not self.query.is_empty():
            if not _names_a_tenant(self.query):
                return f"<{type(self).__name__} {self.model.__name__}: unscoped, not run>"
        return super().__repr__()

    def _fetch_all(self) -> None:
        if self._result_cache is None:
            self._require_scope()
        super()._fetch_all()

    def iterator(self, chunk_size: int | None = None) -> Iterator[_M]:
        self._require_scope()
        return super().iterator(chunk_size)

    def count(self) -> int:
        if self._result_cache is None:
            self._require_scope()
        return super().count()

    def exists(self) -> bool:
        if self._result_cache is None:
            self._require_scope()
        return super().exists()

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._require_scope()
        return super().aggregate(*args, **kwargs)

    def update(self, **kwargs: Any) -> int:
        self._require_scope()
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        self._require_scope()
        return super().delete()

    def in_bulk(
        self, id_list: Iterable[Any] | None = None, *, field_name: str = "pk"
    ) -> dict[Any, _M]:
        self._require_scope()
        return super().in_bulk(id_list, field_name=field_name)


# Assigned to a name first: the django-stubs plugin types `X = Manager.from_queryset(QS)`
# (a manager whose methods return TenantScopedQuerySet), not a call inside a class base.
_TenantScopedManagerBase = models.Manager.from_queryset(TenantScopedQuerySet)


class TenantScopedManager(_TenantScopedManagerBase[_M]):
    """Default manager of tenant-owned models: queries must name a tenant."""
