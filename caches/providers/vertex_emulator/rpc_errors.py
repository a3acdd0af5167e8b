"""google.rpc.Status errors as Vertex sends them, and the verbatim messages we know.

Every failure the emulator produces goes through :class:`RpcError` so that the google-genai
client maps it exactly as it maps a real Vertex error (``errors.ClientError`` for 4xx,
``errors.ServerError`` for 5xx, with ``.code``, ``.status`` and ``.message`` filled in).
Messages quoted in the spec (``shared/specs/vertex-context-cache.md`` §1.6, §1.7) are kept
verbatim; the others are our own wording and say so in a comment.
"""

from __future__ import annotations

from typing import Any

# HTTP code -> canonical google.rpc.Code name, as the Google front end pairs them.
STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

# Spec §1.7, seen verbatim in many public repositories.
RESOURCE_EXHAUSTED_MESSAGE = (
    "Resource exhausted. Please try again later. Please refer to "
    "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details."
)
# Spec §1.6 (full sentence as quoted in public bug reports).
CACHE_WITH_GENERATION_FIELDS_MESSAGE = (
    "CachedContent can not be used with GenerateContent request setting system_instruction, "
    "tools or tool_config. Proposed fix: move those values to CachedContent from "
    "GenerateContent request."
)
# The standard Google front-end text for a missing or unusable bearer token.
UNAUTHENTICATED_MESSAGE = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)
# Generic texts for injected server faults; Vertex's own wording varies by backend.
INTERNAL_MESSAGE = "Internal error encountered."
UNAVAILABLE_MESSAGE = "The service is currently unavailable."

_DEFAULT_MESSAGES: dict[int, str] = {
    401: UNAUTHENTICATED_MESSAGE,
    429: RESOURCE_EXHAUSTED_MESSAGE,
    500: INTERNAL_MESSAGE,
    503: UNAVAILABLE_MESSAGE,
}


def status_name_for(code: int) -> str:
    """Return the canonical status name for an HTTP code (``UNKNOWN`` when unmapped)."""
    if code in STATUS_NAMES:
        return STATUS_NAMES[code]
    if 400 <= code < 500:
        return "FAILED_PRECONDITION"
    return "UNKNOWN"


def default_message_for(code: int) -> str:
    """Return the message the emulator uses for an injected fault with no message of its own."""
    return _DEFAULT_MESSAGES.get(code, f"Injected fault: HTTP {code}.")


class RpcError(Exception):
    """A google.rpc.Status to send back; raised anywhere below the HTTP layer.

    ``wrap_in_array`` reproduces Vertex's occasional ``[{"error": …}]`` body, which the genai
    client unwraps; fault injection uses it to test that callers cope.
    """

    def __init__(
        self,
        code: int,
        message: str,
        *,
        status: str | None = None,
        details: list[dict[str, Any]] | None = None,
        wrap_in_array: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or status_name_for(code)
        self.details = list(details or [])
        self.wrap_in_array = wrap_in_array

    def to_body(self) -> dict[str, Any] | list[dict[str, Any]]:
        """Return the JSON body: ``{"error": {"code", "message", "status", "details"}}``."""
        body = {
            "error": {
                "code": self.code,
                "message": self.message,
                "status": self.status,
                "details": self.details,
            }
        }
        return [body] if self.wrap_in_array else body


def invalid_argument(message: str) -> RpcError:
    """400 INVALID_ARGUMENT."""
    return RpcError(400, message)


def not_found(message: str) -> RpcError:
    """404 NOT_FOUND."""
    return RpcError(404, message)


def unauthenticated() -> RpcError:
    """401 UNAUTHENTICATED with the Google front end's usual text."""
    return RpcError(401, UNAUTHENTICATED_MESSAGE)


def permission_denied(*, permission: str, resource: str) -> RpcError:
    """403 PERMISSION_DENIED in the spec §1.7 wording, with the IAM ``ErrorInfo`` detail.

    ``resource`` is the relative name (``projects/p/locations/l…``); the message prefixes it
    with ``//aiplatform.googleapis.com/`` as Vertex does.
    """
    message = (
        f"Permission '{permission}' denied on resource "
        f"'//aiplatform.googleapis.com/{resource}' (or it may not exist)."
    )
    detail = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "IAM_PERMISSION_DENIED",
        "domain": "aiplatform.googleapis.com",
        "metadata": {"permission": permission, "resource": resource},
    }
    return RpcError(403, message, details=[detail])


def below_minimum_tokens(*, token_count: int, minimum: int) -> RpcError:
    """400 INVALID_ARGUMENT with Vertex's exact too-few-tokens wording (spec §1.7)."""
    return invalid_argument(
        f"The cached content is of {token_count} tokens. "
        f"The minimum token count to start caching is {minimum}."
    )


def publisher_model_not_found(model_name: str) -> RpcError:
    """404 NOT_FOUND for a model Vertex does not serve, worded as Vertex words it.

    The short form "Publisher Model `…` not found." is the one seen in public bug reports
    (e.g. google/adk-python#833); Vertex sometimes appends advice about model versions.
    """
    return not_found(f"Publisher Model `{model_name}` not found.")


def cached_content_not_found(name: str) -> RpcError:
    """404 NOT_FOUND for an unknown, deleted or expired cache.

    Our wording: the verbatim Vertex text is not documented (spec §7 item 5). It names
    "CachedContent" because clients key their "expired, recreate" logic on that word.
    """
    return not_found(f'CachedContent "{name}" not found (it may have expired or been deleted).')
