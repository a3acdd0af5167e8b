"""Tenants, principals, roles, role bindings, API keys and authorization."""
