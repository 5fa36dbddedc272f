"""What every API view shares: errors as JSON `{"detail": ...}` (a domain Conflict is a 409, a lock
or statement timeout or the database out of reach a 503), a body size cap, strict input and pagination."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import json

from core import database_busy
from core.errors import Conflict, FieldRefused, Forbidden, NotFound, TooMany
from core.parsing import InvalidInput, check_text, parse_int


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request body too large"
    default_code = "payload_too_large"


class DatabaseBusy(exceptions.APIException):
    """503 with Retry-After (DRF sends `wait` as the header): core.database_busy."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = database_busy.BUSY.detail
    default_code = "database_busy"
    wait = database_busy.BUSY.retry_after_seconds


class DatabaseUnavailable(DatabaseBusy):
    default_detail = database_busy.UNAVAILABLE.detail
    default_code = "database_unavailable"
    wait = database_busy.UNAVAILABLE.retry_after_seconds


class SizeLimitedJSONParser(JSONParser):
    """JSON bodies up to a size setting; DRF reads the raw stream, past Django's own cap. No
    string in the body, nor any name, may hold what PostgreSQL cannot store (core.parsing.check_text)."""

    limit_setting = "API_MAX_BODY_BYTES"
    checks_text = True

    def parse(
        self, stream: IO[Any] | None, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:  # any JSON value: the serializer refuses what is not an object
        limit = getattr(settings, self.limit_setting)
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared:
            try:
                size = parse_int(declared)
            except InvalidInput as error:
                raise exceptions.ParseError(f"Content-Length: {error}") from error
            if size > limit:
                raise PayloadTooLarge(f"request body of {size} bytes is over the limit of {limit}")
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.loads(body.decode(encoding), parse_constant=json.strict_constant)
        except (ValueError, UnicodeDecodeError) as error:
            raise exceptions.ParseError(f"malformed JSON: {error}") from error
        except RecursionError as error:
            raise exceptions.ParseError("malformed JSON: nested too deeply") from error
        if self.checks_text:
            try:
                check_text(data)
            except InvalidInput as error:
                raise exceptions.ParseError(str(error)) from error
        return data


def _first_error(errors: object, prefix: str = "") -> str:
    """The first message of a DRF error tree, named by its field path."""
    if isinstance(errors, dict):
        key, value = next(iter(errors.items()))
        # An object's own error (a nested one's too) is named by the path to the object.
        return _first_error(value, prefix if key == "non_field_errors" else f"{prefix}{key}.")
    if isinstance(errors, list) and errors:
        return _first_error(errors[0], prefix)
    return f"{prefix.rstrip('.')}: {errors}" if prefix else str(errors)


def api_exception_handler(error: Exception, context: dict[str, Any]) -> Response | None:
    # Imported here: rest_framework.views reads the REST_FRAMEWORK settings, which name this module.
    from rest_framework.views import exception_handler

    if isinstance(error, FieldRefused):
        error = exceptions.ValidationError({error.field: [error.reason]})
    elif isinstance(error, Forbidden):
        error = exceptions.PermissionDenied(str(error))
    elif isinstance(error, NotFound):
        error = exceptions.NotFound(str(error))
    elif isinstance(error, Conflict):
        error = exceptions.APIException(str(error))
        error.status_code = status.HTTP_409_CONFLICT
    elif isinstance(error, TooMany):
        error = exceptions.Throttled(detail=str(error))
    elif database_busy.gave_up_waiting(error):
        error = DatabaseBusy()
    elif database_busy.unavailable(error):
        error = DatabaseUnavailable()
    response = exception_handler(error, context)
    if response is not None and isinstance(error, exceptions.ValidationError):
        response.data = {"detail": _first_error(response.data), "errors": response.data}
    return response


class Pagination(LimitOffsetPagination):
    """DRF's limit/offset pages, both read strictly (ASCII digits; anything else is a 400, where
    DRF would quietly serve the first page) and both bounded: a limit or an offset past what
    PostgreSQL takes as a bigint would be a 500, not an empty page."""

    max_limit = 1000
    max_offset = 2**31

    def get_limit(self, request: Request) -> int | None:
        text = request.query_params.get(self.limit_query_param)
        if text is None:
            return self.default_limit
        return min(self._number(self.limit_query_param, text, minimum=1), self.max_limit)

    def get_offset(self, request: Request) -> int:
        text = request.query_params.get(self.offset_query_param)
        if text is None:
            return 0
        return min(self._number(self.offset_query_param, text, minimum=0), self.max_offset)

    @staticmethod
    def _number(name: str, text: str, *, minimum: int) -> int:
        try:
            return parse_int(text, minimum=minimum)
        except InvalidInput as error:
            raise exceptions.ValidationError({name: [str(error)]}) from error


class StrictInputSerializer(serializers.Serializer[Any]):
    """Refuses a body that is not an object, or that names a field the serializer does not know."""

    def to_internal_value(self, data: object) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON number, not a string or a boolean that looks like one."""

    def to_internal_value(self, data: object) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: object) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


def json_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"detail": "not found"}, status=404)


def json_server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"detail": "internal error; it has been logged"}, status=500)
