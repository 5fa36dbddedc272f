"""Every setting is read from the environment and checked as the process starts: a value that
cannot be used stops it with one line naming the variable and what it accepts, no traceback."""

import ipaddress
import os
import subprocess
import sys

import pytest

from gpufleet import environment
from tests.support import REPO_ROOT


def refusal(monkeypatch, name: str, value: str, read) -> str:
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        read()
    return str(stopped.value.code)


def test_unset_or_blank_takes_the_default(monkeypatch):
    monkeypatch.delenv("GF_X", raising=False)
    assert environment.integer("GF_X", 16, minimum=1) == 16
    monkeypatch.setenv("GF_X", "  ")
    assert environment.number("GF_X", 2.5, positive=True) == 2.5
    assert environment.boolean("GF_X", True) is True
    assert environment.names("GF_X") == []


def test_values_are_read_as_written(monkeypatch):
    monkeypatch.setenv("GF_X", " 0.05 ")
    assert environment.number("GF_X", 1, positive=True) == 0.05
    monkeypatch.setenv("GF_X", "Off")
    assert environment.boolean("GF_X", True) is False
    monkeypatch.setenv("GF_X", "10.0.0.0/8, fc00::/7,")
    assert environment.networks("GF_X") == (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fc00::/7"))
    monkeypatch.setenv("GF_X", "4/day")
    assert environment.rate("GF_X", "600/min") == "4/day"


@pytest.mark.parametrize(
    ("value", "read", "message"),
    [
        ("0", lambda: environment.integer("GF_X", 16, minimum=1), "'0': expected a whole number of at least 1"),
        ("1.5", lambda: environment.integer("GF_X", 16, minimum=1), "'1.5': expected a whole number of at least 1"),
        ("0", lambda: environment.number("GF_X", 5, positive=True), "'0': expected a number above 0"),
        ("nan", lambda: environment.number("GF_X", 5, positive=True), "'nan': expected a number above 0"),
        ("-1", lambda: environment.number("GF_X", 5), "'-1': expected a number of at least 0"),
        ("ture", lambda: environment.boolean("GF_X", False), "'ture': expected 1, true, yes or on, or 0, false"),
        ("10.0.0.1/8", lambda: environment.networks("GF_X"), "'10.0.0.1/8': expected comma-separated networks"),
        ("600 per min", lambda: environment.rate("GF_X", "600/min"), "'600 per min': expected a count per period"),
        ("LOUD", lambda: environment.choice("GF_X", "INFO", ("INFO", "DEBUG")), "'LOUD': expected one of INFO, DEBUG"),
    ],
)  # fmt: skip
def test_a_value_that_cannot_be_used_stops_with_the_variable_and_what_it_accepts(monkeypatch, value, read, message):
    assert refusal(monkeypatch, "GF_X", value, read).startswith(f"gpu-fleet: GF_X={message}")


def test_a_process_with_a_bad_setting_stops_at_start_with_one_line():
    # It used to start, and fail inside a worker at its first read of the BMC event logs.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO_ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "gpufleet.settings", "GPUFLEET_SEL_READ_CONCURRENCY": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr == "gpu-fleet: GPUFLEET_SEL_READ_CONCURRENCY='0': expected a whole number of at least 1\n"
