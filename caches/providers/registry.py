"""Pick the provider client for a cache."""

from __future__ import annotations

from uuid import UUID

from django.conf import settings

from caches.models import CacheObject, Provider, TenantCacheSettings
from caches.providers.base import CacheProviderClient
from caches.providers.vertex import VertexProvider, VertexScope
from caches.providers.vllm import VllmProvider


def vertex_scope_for_tenant(tenant_id: UUID | str) -> VertexScope:
    """The tenant's own project when configured, else the deployment default."""
    own = TenantCacheSettings.objects.filter(tenant_id=tenant_id).first()
    if own is not None and own.vertex_project:
        return VertexScope(
            project=own.vertex_project,
            location=own.vertex_location or settings.CACHEPLANE_VERTEX_LOCATION,
            credentials_file=own.vertex_credentials_file,
        )
    return VertexScope(
        project=settings.CACHEPLANE_VERTEX_PROJECT, location=settings.CACHEPLANE_VERTEX_LOCATION
    )


def vertex_scope_for_cache(cache: CacheObject) -> VertexScope:
    """The scope recorded on the cache (it never moves), with the tenant's credentials."""
    tenant_scope = vertex_scope_for_tenant(cache.tenant_id)
    credentials = (
        tenant_scope.credentials_file if tenant_scope.project == cache.vertex_project else ""
    )
    return VertexScope(cache.vertex_project, cache.vertex_location, credentials)


def provider_for(cache: CacheObject) -> CacheProviderClient:
    if cache.provider == Provider.VERTEX:
        return VertexProvider(vertex_scope_for_cache(cache))
    return VllmProvider()
