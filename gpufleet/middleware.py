"""Refusals at the door, before any view, on both listeners."""

from __future__ import annotations

from django.http import JsonResponse

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
