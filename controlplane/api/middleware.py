"""Query-string hygiene for the REST API, in one place for every view.

Filters go straight into ORM lookups; a NUL character there is a PostgreSQL error (a
500) in whichever view receives it. Query strings never pass through the JSON parser,
so they are checked here with the same rules (``controlplane.strict_json.check_value``)
and refused with 400 ``invalid_query`` before any view runs.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from controlplane.api.errors import error_body
from controlplane.strict_json import StrictJsonError, check_value

API_PREFIX = "/api/"


class QueryStringCheckMiddleware:
    """400 ``invalid_query`` for an API request whose query string holds NUL/surrogates."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIX):
            problem = query_string_problem(request)
            if problem is not None:
                return JsonResponse(error_body("invalid_query", problem), status=400)
        return self.get_response(request)


def query_string_problem(request: HttpRequest) -> str | None:
    """A message naming the first unacceptable query parameter, or None."""
    for name, values in request.GET.lists():
        try:
            check_value([name, *values])
        except StrictJsonError as exc:
            return f"Query parameter {name[:40]!r}: {exc.message}"
    return None
