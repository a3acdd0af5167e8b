"""Production refuses to start with a secret anyone could know: the placeholders the
manifests and .env.example once shipped, and the dev overlay's generated values."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.support import REPO, render, resource

_REAL = {
    "CACHEPLANE_SECRET_KEY": secrets.token_urlsafe(64),
    "CACHEPLANE_METRICS_TOKEN": secrets.token_urlsafe(32),
    "CACHEPLANE_VLLM_API_KEY": secrets.token_urlsafe(24),
}


def _production_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST"))}
    env.update(_REAL)
    env["CACHEPLANE_ENV"] = "production"
    env["CACHEPLANE_ALLOWED_HOSTS"] = "cacheplane.example.com"
    env["CACHEPLANE_DATA_DIR"] = str(tmp_path / "data")
    return env


def _check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "manage", "check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        # The 67-character key the base Secret shipped: it passed the length check.
        (
            "CACHEPLANE_SECRET_KEY",
            "replace-me-with-50-or-more-random-characters-from-your-secret-store",
        ),
        (
            "CACHEPLANE_SECRET_KEY",
            "dev-insecure-cacheplane-secret-key-change-me-in-production-0123456789",
        ),
        ("CACHEPLANE_METRICS_TOKEN", "change-me-to-a-long-random-metrics-token"),
        ("CACHEPLANE_VLLM_API_KEY", "replace-me"),
        ("DATABASE_URL", "postgresql://cacheplane:replace-me@postgres:5432/cacheplane"),
        (
            "DATABASE_URL",
            "postgresql://cacheplane:secret@127.0.0.1:5432/cacheplane",
        ),  # .env.example
        ("DATABASE_MIGRATE_URL", "postgresql://owner:changeme@postgres:5432/cacheplane"),
        ("REDIS_URL", "redis://:placeholder@redis:6379/0"),
    ],
)
def test_production_refuses_a_known_placeholder_at_start_up(
    tmp_path: Path, variable: str, value: str
) -> None:
    env = _production_env(tmp_path)
    env[variable] = value
    result = _check(env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        f"cacheplane: configuration error: {variable}: is a known placeholder value; "
        "production needs a real secret from your secret store"
    )


def test_the_dev_overlays_generated_secret_cannot_serve_production(tmp_path: Path) -> None:
    docs = render("dev")
    secret = next(
        d
        for d in docs
        if d["kind"] == "Secret" and d["metadata"]["name"].startswith("cacheplane-secrets")
    )
    import base64

    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert resource(docs, "ConfigMap", "cacheplane-config")["data"]["CACHEPLANE_ENV"] == (
        "development"
    )
    for variable in ("CACHEPLANE_SECRET_KEY", "CACHEPLANE_METRICS_TOKEN", "DATABASE_URL"):
        env = _production_env(tmp_path)
        env[variable] = values[variable]
        result = _check(env)
        assert result.returncode == 2, variable
        assert f"{variable}: is a known placeholder value" in result.stderr


def test_production_with_real_secrets_starts(tmp_path: Path) -> None:
    result = _check(_production_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
