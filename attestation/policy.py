"""Attestation policy: what a node must prove, loaded from TOML or JSON against a strict schema.

Every key is required and no other key is allowed, so a typo or an omission is an error at load
time, never a silently weaker policy. Keys (see `policies/default.toml`):

- `name` (string): how verdicts and the admin refer to the policy.
- `cc_mode` (string: "on", "off" or "devtools"): the confidential-computing mode every GPU must
  report. It has no default: a policy that omits it is rejected, never read as "off".
- `max_evidence_age_seconds` (integer, 1 to 86400): how long after its nonce was issued
  (`verifier.new_nonce`) evidence may still be verified.
- `boot.pcrs` (table of component -> PCR index 0-23): the boot components that must be measured
  and the SHA-256 PCR each is measured into; the quote must cover exactly these PCRs.
- `gpu.measurements` (array of strings): the measurements every GPU report must carry.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

CC_MODES = ("on", "off", "devtools")
MAX_EVIDENCE_AGE_SECONDS = 86_400
PCR_COUNT = 24
MAX_NAME_LENGTH = 64


class PolicyError(ValueError):
    """The policy document is not a valid policy; the message names the key."""


@dataclass(frozen=True)
class Policy:
    name: str
    cc_mode: str
    max_evidence_age_seconds: int
    boot_pcrs: Mapping[str, int]
    gpu_measurements: tuple[str, ...]

    @property
    def quoted_pcrs(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.boot_pcrs.values())))


def load_policy(text: str, *, format: Literal["toml", "json"]) -> Policy:
    if format == "toml":
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise PolicyError(f"the policy is not valid TOML: {err}") from None
    elif format == "json":
        try:
            document = json.loads(text)
        except ValueError as err:
            raise PolicyError(f"the policy is not valid JSON: {err}") from None
    else:
        raise PolicyError(f"unknown policy format {format!r}: use 'toml' or 'json'")
    return _policy(document)


def load_policy_file(path: str | Path) -> Policy:
    """Load a policy file; the suffix (.toml or .json) says its format."""
    path = Path(path)
    formats = {".toml": "toml", ".json": "json"}
    if path.suffix not in formats:
        raise PolicyError(f"{path}: a policy file must end in .toml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise PolicyError(f"{path}: cannot read the policy: {err}") from None
    try:
        return load_policy(text, format=formats[path.suffix])
    except PolicyError as err:
        raise PolicyError(f"{path}: {err}") from None


def _policy(document: object) -> Policy:
    top = _table(document, "", {"name", "cc_mode", "max_evidence_age_seconds", "boot", "gpu"})
    boot = _table(top["boot"], "boot", {"pcrs"})
    gpu = _table(top["gpu"], "gpu", {"measurements"})

    name = _string(top["name"], "name")
    cc_mode = _string(top["cc_mode"], "cc_mode")
    if cc_mode not in CC_MODES:
        raise PolicyError(f"'cc_mode' must be one of {', '.join(CC_MODES)}, got {cc_mode!r}")
    max_age = _integer(top["max_evidence_age_seconds"], "max_evidence_age_seconds")
    if not 1 <= max_age <= MAX_EVIDENCE_AGE_SECONDS:
        raise PolicyError(f"'max_evidence_age_seconds' must be from 1 to {MAX_EVIDENCE_AGE_SECONDS}, got {max_age}")

    if not isinstance(boot["pcrs"], dict) or not boot["pcrs"]:
        raise PolicyError("'boot.pcrs' must be a non-empty table of boot component -> PCR index")
    boot_pcrs = {}
    for component, pcr in boot["pcrs"].items():
        key = f"boot.pcrs.{component}"
        _string(component, key)
        boot_pcrs[component] = _integer(pcr, key)
        if not 0 <= pcr < PCR_COUNT:
            raise PolicyError(f"'{key}' must be a PCR index from 0 to {PCR_COUNT - 1}, got {pcr}")

    measurements = gpu["measurements"]
    if not isinstance(measurements, list) or not measurements:
        raise PolicyError("'gpu.measurements' must be a non-empty array of measurement names")
    for position, measurement in enumerate(measurements):
        _string(measurement, f"gpu.measurements[{position}]")
    if len(set(measurements)) != len(measurements):
        raise PolicyError("'gpu.measurements' names a measurement twice")

    return Policy(
        name=name,
        cc_mode=cc_mode,
        max_evidence_age_seconds=max_age,
        boot_pcrs=MappingProxyType(boot_pcrs),
        gpu_measurements=tuple(measurements),
    )


def _table(value: object, where: str, keys: set[str]) -> dict:
    label = f"'{where}'" if where else "the policy"
    if not isinstance(value, dict):
        raise PolicyError(f"{label} must be a table, got {_type_name(value)}")
    prefix = f"{where}." if where else ""
    unknown = sorted(str(k) for k in value.keys() - keys)
    if unknown:
        raise PolicyError(f"unknown key '{prefix}{unknown[0]}': allowed keys are {', '.join(sorted(keys))}")
    missing = sorted(keys - value.keys())
    if "cc_mode" in missing:
        raise PolicyError(
            "missing key 'cc_mode': a policy must state the confidential-computing mode every GPU must report"
            f" ({', '.join(CC_MODES)}); it is never assumed to be off"
        )
    if missing:
        raise PolicyError(f"missing key '{prefix}{missing[0]}'")
    return value


def _string(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise PolicyError(f"'{key}' must be a string, got {_type_name(value)}")
    if not value or len(value) > MAX_NAME_LENGTH:
        raise PolicyError(f"'{key}' must be 1 to {MAX_NAME_LENGTH} characters")
    return value


def _integer(value: object, key: str) -> int:
    # bool is an int in Python; `true` is never a number of seconds or a PCR index.
    if not isinstance(value, int) or isinstance(value, bool):
        raise PolicyError(f"'{key}' must be an integer, got {_type_name(value)}")
    return value


def _type_name(value: object) -> str:
    names = {dict: "a table", list: "an array", str: "a string", bool: "a boolean", int: "an integer"}
    return names.get(type(value), type(value).__name__)
