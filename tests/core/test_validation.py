"""core.validation: each check returns what it accepts, and names the path of what it refuses. No Django."""

from __future__ import annotations

import re

import pytest

from core import validation
from core.parsing import InvalidInput


def refused(check, *args, **kwargs) -> validation.Invalid:
    with pytest.raises(validation.Invalid) as raised:
        check(*args, **kwargs)
    return raised.value


def test_the_message_is_the_path_then_the_problem_and_the_error_keeps_all_three():
    error = refused(validation.text, 7, "alerts[2].labels.node", max_length=10)
    assert str(error) == "alerts[2].labels.node: must be a string"
    assert (error.path, error.problem, error.found) == ("alerts[2].labels.node", "must be a string", 7)
    assert isinstance(error, InvalidInput) and isinstance(error, ValueError)


def test_the_document_itself_has_an_empty_path_and_its_message_is_the_problem_alone():
    assert str(refused(validation.mapping, [], "")) == "must be an object"


@pytest.mark.parametrize(
    ("path", "key", "inside"),
    [("", "alerts", "alerts"), ("alerts", 2, "alerts[2]"), ("alerts[2]", "labels", "alerts[2].labels")],
)
def test_at_names_a_key_or_an_item_inside_a_path(path, key, inside):
    assert validation.at(path, key) == inside


# mapping and sequence


def test_a_mapping_is_a_dict_within_its_size():
    assert validation.mapping({"a": 1, "b": 2}, "x", max_items=2) == {"a": 1, "b": 2}
    assert refused(validation.mapping, ["a"], "x").problem == "must be an object"
    assert refused(validation.mapping, {"a": 1, "b": 2, "c": 3}, "x", max_items=2).problem == "at most 2 entries"
    assert (
        refused(validation.mapping, {}, "x", min_items=1, expected="a non-empty table").problem
        == "must be a non-empty table"
    )


def test_a_sequence_is_a_list_within_its_size():
    assert validation.sequence([1, 2], "x", min_items=1, max_items=2) == [1, 2]
    for value in ({"0": 1}, (1, 2), "12", None):
        assert refused(validation.sequence, value, "x").problem == "must be a list"
    assert refused(validation.sequence, [1, 2, 3], "x", max_items=2).problem == "at most 2 items"
    assert refused(validation.sequence, [], "x", min_items=1, expected="a list of 1 or 2 things").problem == (
        "must be a list of 1 or 2 things"
    )


# text


def test_text_is_a_string_of_bounded_length():
    assert validation.text("abc", "x", max_length=3) == "abc"
    assert validation.text("", "x", min_length=0, max_length=3) == ""
    assert refused(validation.text, b"abc", "x", max_length=3).problem == "must be a string"


@pytest.mark.parametrize(
    ("value", "options", "problem"),
    [
        ("", {"max_length": 64}, "must be 1 to 64 characters"),
        ("a" * 65, {"max_length": 64}, "must be 1 to 64 characters"),
        ("a" * 5, {"min_length": 0, "max_length": 4}, "at most 4 characters"),
        ("", {"max_length": 4, "expected": "a release name"}, "must be a release name"),
    ],
)
def test_text_of_the_wrong_length_says_the_bounds_or_what_was_expected(value, options, problem):
    assert refused(validation.text, value, "x", **options).problem == problem


def test_text_of_the_wrong_type_names_the_type_even_with_an_expectation():
    assert refused(validation.text, None, "x", max_length=4, expected="a release name").problem == "must be a string"


# integer


def test_an_integer_is_an_int_and_never_a_bool_a_float_or_a_numeral():
    assert validation.integer(0, "x", minimum=0) == 0
    for value in (True, False, 1.0, "1", None):
        assert refused(validation.integer, value, "x").problem == "must be an integer"


@pytest.mark.parametrize(
    ("value", "bounds", "problem"),
    [
        (0, {"minimum": 1, "maximum": 86400}, "must be from 1 to 86400"),
        (-1, {"minimum": 0}, "must be at least 0"),
        (9, {"maximum": 8}, "must be at most 8"),
        (24, {"minimum": 0, "maximum": 23, "expected": "a PCR index from 0 to 23"}, "must be a PCR index from 0 to 23"),
    ],
)
def test_an_integer_out_of_range_says_the_range_or_what_was_expected(value, bounds, problem):
    assert refused(validation.integer, value, "x", **bounds).problem == problem


def test_an_integer_of_the_wrong_type_names_the_type_even_with_an_expectation():
    assert (
        refused(validation.integer, "9", "x", minimum=0, maximum=23, expected="a PCR index").problem
        == "must be an integer"
    )


# one_of and matches


def test_one_of_takes_a_choice_of_the_same_type_only():
    assert validation.one_of("on", "x", ("on", "off")) == "on"
    assert validation.one_of(1, "x", (1,)) == 1
    assert (
        refused(validation.one_of, "sometimes", "x", ("on", "off", "devtools")).problem
        == "must be one of on, off, devtools"
    )
    assert refused(validation.one_of, True, "x", (1,)).problem == "must be 1"
    assert refused(validation.one_of, 4, "x", ("4",)).problem == "must be '4'"
    assert refused(validation.one_of, ["on"], "x", ("on",)).found == ["on"]


def test_matches_takes_a_string_the_pattern_matches_whole():
    hex16 = re.compile(r"[0-9a-f]{16}")
    assert validation.matches("472c046017b52349", "x", hex16, "16 hex digits") == "472c046017b52349"
    for value in ("472c046017b5234", "472c046017b52349\n", " 472c046017b52349", 0x472C046017B52349, None):
        assert refused(validation.matches, value, "x", hex16, "16 hex digits").problem == "must be 16 hex digits"
