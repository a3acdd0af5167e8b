"""Shared plumbing of the console's management views.

A management view is a thin adapter: bind a form, call one service (the same one the REST
API calls, with an ``Actor`` built from the request, so audit rows are identical), then
redirect (POST/redirect/GET) with a flash message, or re-render the page with the form's
errors next to their fields and a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from controlplane.errors import DomainError
from frontend.forms import FIELD_FOR_CODE
from tenants.actor import Actor

T = TypeVar("T")


def actor(request: HttpRequest) -> Actor:
    """The acting principal of a console request (session auth, source IP, request id)."""
    return Actor.from_request(request)


#: Prefix of a form error's code that came from a domain error (``_form.html`` shows the
#: stable code on a details line under the plain-words message, and only for those).
DOMAIN_CODE_PREFIX = "domain:"


def attempt(form: forms.Form, call: Callable[[], T]) -> T | None:
    """Run a service call; a domain error becomes a form error (None is returned).

    The error lands on the field it concerns (``field_for``), else on the form as a
    whole, in plain words (``plain_message``); its stable code rides along for the
    details line.
    """
    try:
        return call()
    except DomainError as exc:
        field = field_for(form, exc)
        form.add_error(
            field,
            forms.ValidationError(plain_message(form, exc), code=f"{DOMAIN_CODE_PREFIX}{exc.code}"),
        )
        return None


def plain_message(form: forms.Form, exc: DomainError) -> str:
    """The service's message with a leading field name in the form's own words
    ("expires_at must be ..." → "Expires (UTC) must be ...")."""
    message = exc.message
    for name, field in form.fields.items():
        if message.startswith(f"{name} ") and field.label:
            return f"{field.label}{message[len(name) :]}"
    return message


def field_for(form: forms.Form, exc: DomainError) -> str | None:
    """The form field a domain error concerns: by its code (or a parent class's code),
    else the field its details name (``field``), else the field its message starts with
    (``"weight must be ..."``), else a field named in its details, else None (the form)."""
    for cls in type(exc).__mro__:
        field = FIELD_FOR_CODE.get(getattr(cls, "code", ""))
        if field in form.fields:
            return field
        if field == "":  # a whole-form error, whatever the details name
            return None
    named = exc.details.get("field")
    if named in form.fields:
        return str(named)
    for name in form.fields:
        if exc.message.startswith(f"{name} "):
            return name
    for name in form.fields:
        if name in exc.details:
            return name
    return None


def uuid_or_404(value: str) -> str:
    """A path id as a canonical UUID string; anything else is the same 404 as a missing id."""
    import uuid

    from django.http import Http404

    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise Http404("No such object.") from None


def blank_form() -> forms.Form:
    """A bound, validated empty form to carry a service's error for a field-less action."""
    form = forms.Form(data={})
    form.is_valid()
    return form


def done(request: HttpRequest, message: str, to: str) -> HttpResponse:
    """Flash ``message`` and redirect (the browser's reload never repeats the POST)."""
    messages.success(request, message)
    return redirect(to)


def no_store(response: HttpResponse) -> HttpResponse:
    """For responses that show a secret once (a new key, a webhook secret)."""
    response["Cache-Control"] = "no-store"
    return response


def invalid(response: HttpResponse) -> HttpResponse:
    response.status_code = 400
    return response
