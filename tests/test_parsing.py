"""core.parsing: numbers from outside in ASCII digits only, and text PostgreSQL can store."""

import json
import sys

import pytest
from hypothesis import given

from core.parsing import InvalidInput, check_text, parse_int
from tests.support.hostile import HOSTILE_TEXT


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("7", 7), ("007", 7), ("18446744073709551616", 2**64)])
def test_ascii_digits_are_a_number(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "\u00b2", "1\u00b2", "\uff11\uff12", "\u0661", "-1", "+1", " 1", "1 ", "1_000", "1e3", "1.0", "0x1f", "\x00"],
)
def test_anything_but_ascii_digits_is_refused_saying_so(text):
    with pytest.raises(InvalidInput, match="is not a whole number in the digits 0 to 9"):
        parse_int(text)


def test_bounds_are_checked_and_a_huge_number_is_refused_without_converting_it():
    assert parse_int("5", minimum=5, maximum=5) == 5
    with pytest.raises(InvalidInput, match="is less than 1"):
        parse_int("0", minimum=1)
    with pytest.raises(InvalidInput, match="is more than 10"):
        parse_int("11", maximum=10)
    with pytest.raises(InvalidInput, match="is more than 10"):
        parse_int("9" * 100_000, maximum=10)  # past Python's own int() limit of 4300 digits
    with pytest.raises(InvalidInput, match="100000 digits is too long"):
        parse_int("9" * 100_000)


@given(HOSTILE_TEXT)
def test_parse_int_returns_a_number_or_refuses_and_nothing_else(text):
    try:
        value = parse_int(text, maximum=2**63 - 1)
    except InvalidInput:
        return
    assert 0 <= value < 2**63 and text.isascii()


def test_text_of_any_real_character_passes():
    check_text({"pod": "p2", "tags": ["a", {"b": "\u00e9\U0001f600\u00b2"}], "n": 1, "ok": None})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("p\x00", "value: must not contain the NUL character (U+0000)"),
        ("\ud800", "value: must not contain a lone surrogate (U+D800), which is no Unicode character"),
        ('{"pod": "p\\u0000"}', "pod: must not contain the NUL character (U+0000)"),
        ('{"a": [1, {"b\\u0000": 2}]}', "a[1]: a name must not contain the NUL character (U+0000)"),
        ('{"a": [1, "\\udfff"]}', "a[1]: must not contain a lone surrogate (U+DFFF), which is no Unicode character"),
        ('{"first": "\\u0000", "then": "\\u0000"}', "first: must not contain the NUL character (U+0000)"),
    ],
)
def test_text_with_a_nul_or_a_lone_surrogate_is_refused_naming_the_place(value, message):
    parsed = json.loads(value) if value.startswith("{") else value
    with pytest.raises(InvalidInput) as refused:
        check_text(parsed)
    assert str(refused.value) == message


def deepest_json_the_parser_takes() -> list:
    for depth in range(sys.getrecursionlimit(), 0, -10):
        try:
            return json.loads("[" * depth + '"\\u0000"' + "]" * depth)
        except RecursionError:
            continue
    raise AssertionError("no depth parsed")


def test_json_nested_as_deep_as_the_parser_takes_is_checked_without_recursion():
    with pytest.raises(InvalidInput, match=r"^\[0\]\[0\].*: must not contain the NUL character"):
        check_text(deepest_json_the_parser_takes())
