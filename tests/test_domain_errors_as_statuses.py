"""The domain's errors (core/errors.py) get their statuses in one place for the API (core.api's
exception handler) and one for the pages (gpufleet.middleware.DomainErrorsAsStatuses)."""

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.test import RequestFactory

from core.api import api_exception_handler
from core.errors import Conflict, FieldRefused, Forbidden, NotFound, TooMany
from gpufleet.middleware import DomainErrorsAsStatuses

ERRORS = [
    (FieldRefused("hours", "must be at most 720"), 400),
    (Forbidden("your quota is 4 nodes"), 403),
    (NotFound("no webhook 7"), 404),
    (Conflict("the reservation is released"), 409),
    (TooMany("three retries a minute"), 429),
]


@pytest.mark.parametrize("error, status", ERRORS)
def test_the_api_answers_each_with_its_status_and_detail(error, status):
    answer = api_exception_handler(error, {})
    assert answer is not None and answer.status_code == status
    assert answer.data["detail"] == ("hours: must be at most 720" if status == 400 else str(error))


@pytest.mark.parametrize("error, status", ERRORS)
def test_a_page_answers_each_with_its_status(error, status):
    middleware = DomainErrorsAsStatuses(lambda request: None)
    request = RequestFactory().post("/my/reservations")
    if status == 404:
        with pytest.raises(Http404, match="no webhook 7"):  # Django's own 404 page
            middleware.process_exception(request, error)
    elif status == 403:
        with pytest.raises(PermissionDenied):  # Django's own 403 page
            middleware.process_exception(request, error)
    else:
        answer = middleware.process_exception(request, error)
        assert answer is not None and answer.status_code == status
        assert answer.content.decode() == str(error)


def test_any_other_error_is_left_to_django():
    middleware = DomainErrorsAsStatuses(lambda request: None)
    assert middleware.process_exception(RequestFactory().get("/"), ValueError("a bug")) is None
