"""Tenant and platform IAM routes."""

from __future__ import annotations

urlpatterns: list = []
