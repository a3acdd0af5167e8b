"""Gateway errors in OpenAI's error shape, each with a stable ``code``.

``{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}`` — what the OpenAI
SDK parses into ``openai.APIStatusError`` subclasses — plus ``details`` when the error
carries any (a budget refusal's limit, spend and estimate), as the REST API's errors do.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_quota",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "api_error",
}


class GatewayError(Exception):
    """An error answered to the client; nothing upstream has consumed budget for it."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.headers = headers or {}
        self.details = details or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "message": self.message,
            "type": _TYPES.get(self.status, "api_error"),
            "param": self.param,
            "code": self.code,
        }
        if self.details:
            error["details"] = self.details
        return {"error": error}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)
