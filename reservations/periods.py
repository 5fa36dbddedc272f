"""When a reservation may start and how long it may last: a pure function of the request, the
clock and the limits.

No Django import. The limits bound what one tenant can hold: a booking horizon (how far ahead
a reservation may start) and a maximum duration. Without them a single far-future open-ended
hold would block every open-ended request on its nodes for ever, while the nodes look free.
A request without `ends_at` that starts now lasts until it is released, at most the maximum
duration; a later start must say when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.errors import FieldRefused

# A start this close to now counts as starting now: clients' clocks and requests in flight drift.
START_GRACE = timedelta(minutes=1)


@dataclass(frozen=True)
class BookingLimits:
    horizon: timedelta  # how far ahead of now a reservation may start
    max_duration: timedelta  # how long a reservation may last


class PeriodRefused(FieldRefused):
    """The requested period breaks a rule; `field` names the request field to correct."""


def booking_period(
    *, starts_at: datetime | None, ends_at: datetime | None, now: datetime, limits: BookingLimits
) -> tuple[datetime, datetime]:
    """The period to hold, (start, end), or PeriodRefused.

    A start that is missing or past means now. Without `ends_at`, a reservation starting now
    (within START_GRACE) lasts the maximum duration; a later one must give `ends_at`.
    """
    start = max(starts_at or now, now)
    if ends_at is not None and ends_at <= start:
        raise PeriodRefused("ends_at", "must be after starts_at (or after now, if starts_at is not given or past)")
    if start - now > limits.horizon:
        raise PeriodRefused("starts_at", f"must be at most {_days(limits.horizon)} from now")
    if ends_at is None:
        if start - now > START_GRACE:
            raise PeriodRefused("ends_at", "is required for a reservation that starts later than now")
        return start, start + limits.max_duration
    if ends_at - start > limits.max_duration:
        raise PeriodRefused(
            "ends_at", f"must be at most {_days(limits.max_duration)} after starts_at (or after now, if it is earlier)"
        )
    return start, ends_at


def _days(span: timedelta) -> str:
    days = span / timedelta(days=1)
    return f"{days:g} day{'' if days == 1 else 's'}"


def changed_end(*, starts_at: datetime, wanted: datetime, now: datetime, limits: BookingLimits) -> datetime:
    """A reservation's new end, extended or shortened, or PeriodRefused: after now (a reservation
    that should end now is released), after its start, and within the maximum duration of it."""
    if wanted <= now + START_GRACE:
        raise PeriodRefused("ends_at", "must be more than a minute from now: to end it now, release it")
    if wanted <= starts_at:
        raise PeriodRefused("ends_at", "must be after starts_at")
    if wanted - starts_at > limits.max_duration:
        raise PeriodRefused("ends_at", f"must be at most {_days(limits.max_duration)} after starts_at")
    return wanted
