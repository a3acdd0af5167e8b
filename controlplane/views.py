"""Error pages: JSON under /api/ (one error shape everywhere), plain text elsewhere."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from controlplane.api.errors import error_body


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/v1/"))


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return HttpResponse("Not found.", status=404, content_type="text/plain")


def server_error(request: HttpRequest) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(
            error_body("internal_error", "An internal error occurred; it has been logged."),
            status=500,
        )
    return HttpResponse("Internal error.", status=500, content_type="text/plain")


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("malformed_request", "Bad request."), status=400)
    return HttpResponse("Bad request.", status=400, content_type="text/plain")
