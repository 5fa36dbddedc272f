"""Checks of untrusted JSON or TOML documents, each naming the place it refuses.

Pure: the standard library and core.parsing only. Each check returns the value it accepts, and
otherwise raises Invalid: its `path` says where (`alerts[2].labels.node`, "" for the document
itself), its `problem` what is wrong ("must be a string"), and the message is `path: problem`.
A module wraps Invalid in its own error class where its messages have another shape.

`expected` words what a refused value must be, in the document's own vocabulary: the whole
container for `mapping` and `sequence` ("a table", "a non-empty list of PEM certificates"), the
accepted range for `text` and `integer` ("a PCR index from 0 to 23"), whose type errors always
name the type.
"""

from __future__ import annotations

import re
from collections.abc import Sized
from typing import Any, TypeVar

from core.parsing import InvalidInput

_Container = TypeVar("_Container", bound=Sized)
Choice = TypeVar("Choice")


class Invalid(InvalidInput):
    """A value off its schema: where it is, what is wrong with it, and the value itself."""

    def __init__(self, path: str, problem: str, found: object = None):
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path, self.problem, self.found = path, problem, found


def at(path: str, key: str | int) -> str:
    """The path of a key (`alerts.labels`) or of an item (`alerts[2]`) inside `path`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def mapping(
    value: object, path: str, *, min_items: int = 0, max_items: int | None = None, expected: str = "an object"
) -> dict[str, Any]:
    # A JSON or TOML document's keys are strings; its values are whatever the document holds.
    return _sized(value, path, dict, min_items, max_items, expected, "entries")


def sequence(
    value: object, path: str, *, min_items: int = 0, max_items: int | None = None, expected: str = "a list"
) -> list[Any]:
    return _sized(value, path, list, min_items, max_items, expected, "items")


def text(value: object, path: str, *, max_length: int, min_length: int = 1, expected: str | None = None) -> str:
    if not isinstance(value, str):
        raise Invalid(path, "must be a string", value)
    if not min_length <= len(value) <= max_length:
        if expected is None and not min_length:
            raise Invalid(path, f"at most {max_length} characters", value)
        raise Invalid(path, f"must be {expected or f'{min_length} to {max_length} characters'}", value)
    return value


def integer(
    value: object, path: str, *, minimum: int | None = None, maximum: int | None = None, expected: str | None = None
) -> int:
    # bool is an int in Python; `true` is never a count, an index or a number of seconds.
    if not isinstance(value, int) or isinstance(value, bool):
        raise Invalid(path, "must be an integer", value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if expected is None:
            if minimum is None:
                expected = f"at most {maximum}"
            elif maximum is None:
                expected = f"at least {minimum}"
            else:
                expected = f"from {minimum} to {maximum}"
        raise Invalid(path, f"must be {expected}", value)
    return value


def one_of(value: object, path: str, choices: tuple[Choice, ...]) -> Choice:
    """The one of `choices` that `value` is, of the same type too: neither `true` for 1 nor 4 for "4"."""
    for choice in choices:
        if type(value) is type(choice) and value == choice:
            return choice
    words = repr(choices[0]) if len(choices) == 1 else "one of " + ", ".join(map(str, choices))
    raise Invalid(path, f"must be {words}", value)


def matches(value: object, path: str, pattern: re.Pattern[str], expected: str) -> str:
    """A string that `pattern` matches whole."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise Invalid(path, f"must be {expected}", value)
    return value


def _sized(
    value: object,
    path: str,
    kind: type[_Container],
    min_items: int,
    max_items: int | None,
    expected: str,
    unit: str,
) -> _Container:
    if not isinstance(value, kind) or len(value) < min_items:
        raise Invalid(path, f"must be {expected}", value)
    if max_items is not None and len(value) > max_items:
        raise Invalid(path, f"at most {max_items} {unit}", value)
    return value
