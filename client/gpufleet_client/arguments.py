"""The types of `gpufleet`'s arguments: times, positive numbers, durations, attributes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime

WAIT_TIMEOUT_SECONDS = 1800.0


WAIT_INTERVAL_SECONDS = 5.0


def moment(text: str) -> datetime:
    """An ISO 8601 time; without a zone, this machine's local time."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time such as 2026-12-01T09:00Z") from None
    return value if value.tzinfo is not None else value.astimezone()


def positive_number(unit: str) -> Callable[[str], float]:
    """An argparse type: a finite number above zero, of `unit` (named in the error)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of {unit}")
        return value

    return parse


hours = positive_number("hours")


wait_seconds = positive_number("seconds")


def attribute(text: str) -> tuple[str, str]:
    """NAME=VALUE, a node attribute the operators define."""
    name, equals, value = text.partition("=")
    if not (name and equals and value):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE, such as nic=cx7")
    return name, value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def whole_number(text: str) -> int:
    """A whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (0 or more)")
    return value
