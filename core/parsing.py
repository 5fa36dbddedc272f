"""Strict parsing of what comes in from outside: numbers in text, and text PostgreSQL can store.

One place, so that a query parameter, a header, a BMC's answer and bmcsim's routes all refuse
the same things with the same words. Python's own `int()` and `str.isdigit()` accept far more
than an HTTP number: `"²".isdigit()` is true yet `int("²")` fails, and `int()` takes
`"١٢"`, `" 12 "` and `"1_000"`.
"""

from __future__ import annotations

import re

ASCII_DIGITS = re.compile(r"[0-9]+")
NUL = "\x00"
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class InvalidInput(ValueError):
    """Input from outside that is refused; the message says what is wrong with it."""


def parse_int(text: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A whole number written in ASCII digits only: no sign, no spaces, no other script's digits."""
    if not isinstance(text, str) or not ASCII_DIGITS.fullmatch(text):
        raise InvalidInput(f"{_shown(text)} is not a whole number in the digits 0 to 9")
    digits = text.lstrip("0") or "0"
    # Compared as text first: a number of thousands of digits is refused without converting it.
    if maximum is not None and (len(digits) > len(str(maximum)) or int(digits) > maximum):
        raise InvalidInput(f"{_shown(text)} is more than {maximum}")
    try:
        value = int(digits)
    except ValueError as error:  # past sys.get_int_max_str_digits()
        raise InvalidInput(f"a number of {len(digits)} digits is too long") from error
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{value} is less than {minimum}")
    return value


def check_text(value: object, where: str = "") -> None:
    """Raise InvalidInput naming the first place in `value` (a string, or a parsed JSON tree of
    dicts and lists) where a string or a name holds what PostgreSQL cannot store in text or
    jsonb: the NUL character, or a lone UTF-16 surrogate (JSON can spell one, `"\\ud800"`, but
    it is no Unicode character). Such input would otherwise fail deep inside a query, as a 500."""
    pending = [(where, value)]
    while pending:  # a loop, not recursion: JSON nested as deep as the parser allows still fits
        place, item = pending.pop()
        if isinstance(item, str):
            if problem := _unstorable(item):
                raise InvalidInput(f"{place or 'value'}: must not contain {problem}")
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and (problem := _unstorable(key)):
                    raise InvalidInput(f"{place or 'object'}: a name must not contain {problem}")
            children = [(f"{place}.{key}" if place else str(key), child) for key, child in item.items()]
            pending.extend(reversed(children))  # popped in document order
        elif isinstance(item, list | tuple):
            pending.extend(reversed([(f"{place}[{index}]", child) for index, child in enumerate(item)]))


def _unstorable(text: str) -> str | None:
    found = UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == NUL:
        return "the NUL character (U+0000)"
    return f"a lone surrogate (U+{ord(found.group()):04X}), which is no Unicode character"


def _shown(text: object) -> str:
    """The refused text as a message may quote it: short, and with control characters escaped."""
    shown = repr(text)
    return shown if len(shown) <= 40 else shown[:37] + "..."
