"""HTTP middleware shared by every route."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from controlplane.request_context import reset_request_id, sanitize_request_id, set_request_id

REQUEST_ID_HEADER = "X-Request-Id"


class RequestIdMiddleware:
    """Bind a request id for the duration of the request and echo it in the response.

    An incoming ``X-Request-Id`` is kept when well formed so a trace can cross services;
    otherwise a fresh one is minted. Logs and audit rows read it from the context.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = sanitize_request_id(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id  # type: ignore[attr-defined]
        token = set_request_id(request_id)
        try:
            response = self.get_response(request)
        finally:
            reset_request_id(token)
        response[REQUEST_ID_HEADER] = request_id
        return response


class BodySizeLimitMiddleware:
    """Refuse bodies over DATA_UPLOAD_MAX_MEMORY_SIZE with 413 before any view reads them.

    DRF parsers read the request stream directly, bypassing Django's own size check, so
    the limit is enforced here from Content-Length for every route.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        from django.conf import settings
        from django.http import JsonResponse

        from controlplane.api.errors import error_body

        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse(
                error_body("malformed_request", "Invalid Content-Length header."), status=400
            )
        if limit is not None and length > limit:
            return JsonResponse(
                error_body(
                    "payload_too_large",
                    f"Request body of {length} bytes exceeds the limit of {limit} bytes.",
                    {"limit_bytes": limit},
                ),
                status=413,
            )
        return self.get_response(request)


class MachineEndpointMiddleware:
    """Let ``/healthz``, ``/readyz`` and ``/metrics`` through whatever the Host header says.

    Kubelet probes and Prometheus address a pod by its IP, so their Host is
    ``10.1.2.3:8000``, which no ALLOWED_HOSTS lists: CommonMiddleware would answer 400
    (DisallowedHost) and every pod would stay unready, unscraped. These views build no
    URL from the host and set no cookie, so for them alone an unlisted Host is replaced
    by a listed one before any host check; the rest of the stack (metrics, request id,
    audit of a bad scrape token) runs as for any request.
    """

    PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info in self.PATHS:
            from django.conf import settings
            from django.http.request import split_domain_port, validate_host

            domain, _ = split_domain_port(request.META.get("HTTP_HOST", ""))
            allowed = settings.ALLOWED_HOSTS
            if allowed and not validate_host(domain, allowed):
                request.META["HTTP_HOST"] = allowed[0].lstrip(".").replace("*", "localhost")
                request.META.pop("HTTP_X_FORWARDED_HOST", None)
        return self.get_response(request)
