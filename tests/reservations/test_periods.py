"""reservations/periods.py: when a reservation may start and how long it may last, without Django."""

from datetime import UTC, datetime, timedelta

import pytest

from reservations.periods import START_GRACE, BookingLimits, PeriodRefused, booking_period

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LIMITS = BookingLimits(horizon=timedelta(days=90), max_duration=timedelta(days=30))
DAY = timedelta(days=1)


def period(starts_at=None, ends_at=None):
    return booking_period(starts_at=starts_at, ends_at=ends_at, now=NOW, limits=LIMITS)


def refusal(starts_at=None, ends_at=None) -> PeriodRefused:
    with pytest.raises(PeriodRefused) as refused:
        period(starts_at, ends_at)
    return refused.value


def test_a_reservation_without_ends_at_that_starts_now_lasts_the_maximum_duration():
    assert period() == (NOW, NOW + 30 * DAY)
    assert period(NOW - DAY) == (NOW, NOW + 30 * DAY)  # a past start means now
    almost_now = NOW + START_GRACE
    assert period(almost_now) == (almost_now, almost_now + 30 * DAY)


def test_a_later_start_must_say_when_it_ends():
    assert refusal(NOW + START_GRACE + timedelta(seconds=1)).field == "ends_at"
    assert period(NOW + DAY, NOW + 2 * DAY) == (NOW + DAY, NOW + 2 * DAY)


def test_a_start_past_the_horizon_is_refused_naming_starts_at():
    far = refusal(datetime(9999, 12, 31, tzinfo=UTC))
    assert far.field == "starts_at" and "90 days" in far.reason
    assert period(NOW + 90 * DAY, NOW + 91 * DAY) == (NOW + 90 * DAY, NOW + 91 * DAY)
    assert refusal(NOW + 90 * DAY + timedelta(seconds=1), NOW + 91 * DAY).field == "starts_at"


def test_a_period_longer_than_the_maximum_is_refused_naming_ends_at():
    long = refusal(NOW + DAY, NOW + 32 * DAY)
    assert long.field == "ends_at" and "30 days" in long.reason
    assert period(NOW + DAY, NOW + 31 * DAY) == (NOW + DAY, NOW + 31 * DAY)


def test_the_duration_of_a_past_start_counts_from_now():
    assert period(NOW - 10 * DAY, NOW + 30 * DAY) == (NOW, NOW + 30 * DAY)
    assert refusal(NOW - 10 * DAY, NOW + 30 * DAY + timedelta(seconds=1)).field == "ends_at"


def test_an_end_at_or_before_the_start_is_refused_naming_ends_at():
    past = datetime(2000, 1, 1, tzinfo=UTC)
    assert refusal(past, past + DAY).field == "ends_at"  # wholly in the past: the start is now
    assert refusal(NOW + 2 * DAY, NOW + DAY).field == "ends_at"
    assert refusal(None, NOW).field == "ends_at"
