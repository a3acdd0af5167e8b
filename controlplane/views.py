"""Error pages: JSON under /api/ (one error shape everywhere), the console's styled
templates (404.html, 500.html, inside its layout) elsewhere."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from controlplane.api.errors import error_body


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/v1/"))


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception or Exception("Not found."))


def server_error(request: HttpRequest) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(
            error_body("internal_error", "An internal error occurred; it has been logged."),
            status=500,
        )
    return defaults.server_error(request)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("malformed_request", "Bad request."), status=400)
    return HttpResponse("Bad request.", status=400, content_type="text/plain")
