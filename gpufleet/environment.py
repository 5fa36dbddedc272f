"""The settings' environment variables, each read and checked as a process starts.

gpufleet/settings.py reads every variable through one of these readers. A value that cannot be
used stops the process before it serves or works, with one line that names the variable, the
value and what it accepts: never a traceback, and never a failure later inside a worker. An
unset or blank variable takes its default, written as it would be in the environment.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import sys
from typing import NoReturn

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
# Django REST framework's throttle rates: a count per second, minute, hour or day.
_RATE = re.compile(r"\d+/(s|sec|second|m|min|minute|h|hour|d|day)")


def _raw(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def _refuse(name: str, raw: str, accepts: str) -> NoReturn:
    sys.exit(f"gpu-fleet: {name}={raw!r}: expected {accepts}")


def text(name: str, default: str) -> str:
    return _raw(name, default)


def boolean(name: str, default: bool) -> bool:
    raw = _raw(name, "1" if default else "0")
    if raw.lower() not in _TRUE | _FALSE:
        _refuse(name, raw, "1, true, yes or on, or 0, false, no or off")
    return raw.lower() in _TRUE


def integer(name: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
    raw = _raw(name, str(default))
    wanted = (
        f"a whole number from {minimum} to {maximum}"
        if maximum is not None
        else f"a whole number of at least {minimum}"
    )
    try:
        value = int(raw)
    except ValueError:
        _refuse(name, raw, wanted)
    if value < minimum or (maximum is not None and value > maximum):
        _refuse(name, raw, wanted)
    return value


def number(name: str, default: float, *, minimum: float = 0.0, positive: bool = False) -> float:
    """A number such as seconds or days: at least `minimum`, and above 0 where `positive` (a
    period that must pass, a timeout)."""
    raw = _raw(name, f"{default:g}")
    accepts = "a number above 0" if positive else f"a number of at least {minimum:g}"
    try:
        value = float(raw)
    except ValueError:
        _refuse(name, raw, accepts)
    if not math.isfinite(value) or value < minimum or (positive and value <= 0):
        _refuse(name, raw, accepts)
    return value


def names(name: str, default: str = "") -> list[str]:
    """A comma-separated list; blanks between commas are passed over."""
    return [item.strip() for item in _raw(name, default).split(",") if item.strip()]


def networks(name: str, default: str = "") -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated networks in CIDR notation (10.0.0.0/8, fc00::/7)."""
    found = []
    for item in names(name, default):
        try:
            found.append(ipaddress.ip_network(item))
        except ValueError:
            _refuse(name, item, "comma-separated networks in CIDR notation, such as 10.0.0.0/8 (host bits zero)")
    return tuple(found)


def rate(name: str, default: str) -> str:
    raw = _raw(name, default)
    if not _RATE.fullmatch(raw):
        _refuse(name, raw, "a count per period, such as 600/min (periods: s, min, hour, day)")
    return raw


def choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = _raw(name, default)
    if raw not in choices:
        _refuse(name, raw, "one of " + ", ".join(choices))
    return raw
