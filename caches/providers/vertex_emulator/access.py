"""Bearer-token authentication and an optional per-project token allow-list.

Vertex checks an OAuth2 access token on every call (401 without one) and then IAM on the
resource (403). The emulator cannot verify tokens, so any non-empty bearer authenticates; the
allow-list stands in for IAM so tests can model one credential per tenant: once a project has
an allow-list, a token not on it is denied with the spec §1.7 wording.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from .rpc_errors import permission_denied, unauthenticated


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; ``None`` if absent or empty."""
    value = headers.get("authorization", "")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class TokenAllowList:
    """Per-project sets of accepted tokens; projects without a set accept any token."""

    def __init__(self, tokens_by_project: Mapping[str, Iterable[str]] | None = None) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, frozenset[str]] = {
            project: frozenset(tokens) for project, tokens in (tokens_by_project or {}).items()
        }

    def allow(self, project: str, tokens: Iterable[str]) -> None:
        """Replace the accepted tokens of one project."""
        with self._lock:
            self._tokens[project] = frozenset(tokens)

    def clear(self, project: str | None = None) -> None:
        """Lift the restriction for one project, or for all of them."""
        with self._lock:
            if project is None:
                self._tokens.clear()
            else:
                self._tokens.pop(project, None)

    def is_allowed(self, project: str, token: str) -> bool:
        """Whether ``token`` may act in ``project``."""
        with self._lock:
            allowed = self._tokens.get(project)
        return allowed is None or token in allowed

    def snapshot(self) -> dict[str, int]:
        """Project -> number of accepted tokens (the tokens themselves stay private)."""
        with self._lock:
            return {project: len(tokens) for project, tokens in self._tokens.items()}


def authorize(
    *,
    headers: Mapping[str, str],
    allow_list: TokenAllowList,
    project: str,
    permission: str,
    resource: str,
) -> str:
    """Return the caller's token, or raise 401 (no bearer) / 403 (not on the allow-list)."""
    token = bearer_token(headers)
    if token is None:
        raise unauthenticated()
    if not allow_list.is_allowed(project, token):
        raise permission_denied(permission=permission, resource=resource)
    return token
