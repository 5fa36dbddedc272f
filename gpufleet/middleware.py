"""Refusals at the door, before any view, on both listeners."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from core import acting, database_busy
from core.errors import Conflict, FieldRefused, Forbidden, NotFound, TooMany
from core.parsing import InvalidInput, check_text


class RefuseUnstorableText:
    """400 `{"detail": ...}` for text PostgreSQL cannot store or compare (a NUL character,
    `%00` once decoded, above all) in the path, a query parameter or a cookie: it would reach
    a query and fail there as a 500, on the API and the pages alike. Bodies are the JSON
    parser's to check (core.api.SizeLimitedJSONParser), with the same core.parsing.check_text."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            check_text(request.path_info, "path")
            for name, values in request.GET.lists():
                for text in (name, *values):
                    check_text(text, f"query parameter {name!r}")
            for name, value in request.COOKIES.items():
                for text in (name, value):
                    check_text(text, f"cookie {name!r}")
        except InvalidInput as error:
            return JsonResponse({"detail": str(error)}, status=400)
        return self.get_response(request)


class DomainErrorsAsStatuses:
    """The pages' half of mapping the domain's errors (core/errors.py) to answers; the API's is
    core.api.api_exception_handler, since DRF answers its views' exceptions itself. A page that
    shows a refusal next to a form field catches it there; anything else a service refuses
    gets its status here, with Django's own 404 and 403 pages, never a 500. A lock or statement
    timeout, or the database out of reach, is 503 `{"detail": ...}` with Retry-After, as on the API
    (core.database_busy)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, error: Exception) -> HttpResponse | None:
        if isinstance(error, NotFound):
            raise Http404(str(error)) from error
        if isinstance(error, Forbidden):
            raise PermissionDenied(str(error)) from error
        if (refusal := database_busy.refusal(error)) is not None:
            return JsonResponse(
                {"detail": refusal.detail},
                status=503,
                headers={"Retry-After": str(refusal.retry_after_seconds)},
            )
        for kind, status in ((FieldRefused, 400), (Conflict, 409), (TooMany, 429)):
            if isinstance(error, kind):
                return HttpResponse(str(error), status=status, content_type="text/plain; charset=utf-8")
        return None


class WhoActs:
    """Opens the request's scope in core.acting and names the signed-in user (a session's), so
    that the audit rows the request writes name them; an API key names its own (its user and
    prefix: reservations.api.authentication). The private listener only: the public one signs no one in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        def signed_in() -> str:
            # A session's user, read from its cookie; anonymous; or, once DRF authenticated the
            # request, its caller, None for a service's token (Alertmanager's, an agent's).
            user = getattr(request, "user", None)
            return user.get_username() if user is not None and user.is_authenticated else ""

        with acting.request_scope(signed_in):
            return self.get_response(request)
