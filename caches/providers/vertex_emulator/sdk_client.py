"""A google-genai client wired to an emulator, as spec §2.4 says it must be.

Kept apart so the emulator itself does not import google-genai; tests and the control plane's
provider tests call :func:`genai_client_for` instead of repeating the wiring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google import genai
    from google.genai import types


def genai_client_for(
    base_url: str,
    *,
    project: str = "p1",
    location: str = "us-central1",
    token: str = "test",
    api_version: str = "v1",
    retry_options: types.HttpRetryOptions | None = None,
    **http_options: Any,
) -> genai.Client:
    """A Vertex-mode ``genai.Client`` sending ``Bearer {token}`` to ``base_url``.

    A static ``google.oauth2.credentials.Credentials(token=…)`` never refreshes, so the client
    makes no network call besides the emulator (``AnonymousCredentials`` would fail, §2.4).
    """
    import google.oauth2.credentials
    from google import genai
    from google.genai import types

    return genai.Client(
        vertexai=True,
        project=project,
        location=location,
        credentials=google.oauth2.credentials.Credentials(token=token),
        http_options=types.HttpOptions(
            base_url=base_url,
            api_version=api_version,
            retry_options=retry_options,
            **http_options,
        ),
    )
