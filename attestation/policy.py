"""Attestation policy: what a node must prove, loaded from TOML or JSON against a strict schema.

Every key is required and no other key is allowed, so a typo or an omission is an error at load
time, never a silently weaker policy. The one optional key, `boot.secure_boot_required`, only ever
strengthens a policy: its absence is what every policy demanded before it existed. Keys (see
`policies/default.toml`):

- `name` (string): how verdicts and the admin refer to the policy.
- `cc_mode` (string: "on", "off" or "devtools"): the confidential-computing mode every GPU must
  report. It has no default: a policy that omits it is rejected, never read as "off".
- `max_evidence_age_seconds` (integer, 1 to 86400): how long after its nonce was issued
  (`verifier.new_nonce`) evidence may still be verified.
- `boot.pcrs` (table of component -> PCR index 0-23): the boot components that must be measured
  and the SHA-256 PCR each is measured into; the quote must cover exactly these PCRs.
- `boot.secure_boot_required` (boolean, optional, default false): the boot must have run with UEFI
  Secure Boot on, which firmware measures into PCR 7 (an EV_EFI_VARIABLE_DRIVER_CONFIG event of
  the SecureBoot variable); a node whose event log lacks that measurement fails `secure_boot_off`.
  `boot.pcrs` must then assign the component measured there to PCR 7 (`secureboot = 7`), so that
  the quote covers it.
- `gpu.evidence` (string: "in_band", "out_of_band" or "both"): where each enrolled GPU's SPDM
  evidence (its signed measurements, checked against NVIDIA's roots and RIMs) must come from: the
  node's agent (through NVIDIA's driver), its BMC (Redfish ComponentIntegrity, independent of the
  node's OS), or both. No default: a policy that omits it is refused.
- `gpu.ocsp_max_age_seconds` (integer, 0 to 30 days, optional): how long after its nextUpdate an
  OCSP answer for a GPU chain's certificate still counts. Absent, only a current answer does, and
  a certificate without one fails.
- `gpu.measurements` (array of strings, may be empty): the measurements of the signed GPU reports
  in bmcsim's own format (the evidence's `gpus`; every enrolled GPU must send one); empty: none
  are asked for (a real server's agent sends none).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from core import validation

CC_MODES = ("on", "off", "devtools")
GPU_EVIDENCE = {"in_band": ("in_band",), "out_of_band": ("out_of_band",), "both": ("in_band", "out_of_band")}
MAX_OCSP_AGE_SECONDS = 30 * 86_400
MAX_EVIDENCE_AGE_SECONDS = 86_400
PCR_COUNT = 24
MAX_NAME_LENGTH = 64
SECURE_BOOT_PCR = 7  # where UEFI firmware measures Secure Boot's state (TCG PC Client Platform Firmware Profile)

PolicyFormat = Literal["toml", "json"]


class PolicyError(ValueError):
    """The policy document is not a valid policy; the message names the key."""


@dataclass(frozen=True)
class Policy:
    name: str
    cc_mode: str
    max_evidence_age_seconds: int
    boot_pcrs: Mapping[str, int]
    gpu_measurements: tuple[str, ...]
    gpu_evidence: tuple[str, ...]  # the sources each GPU's SPDM evidence must come from: in_band, out_of_band
    secure_boot_required: bool = False
    ocsp_max_age_seconds: int | None = None

    @property
    def quoted_pcrs(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.boot_pcrs.values())))


def load_policy(text: str, *, format: PolicyFormat) -> Policy:
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
    formats: dict[str, PolicyFormat] = {".toml": "toml", ".json": "json"}
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
    try:
        return _read(document)
    except validation.Invalid as error:
        raise PolicyError(f"'{error.path}' {error.problem}" if error.path else f"the policy {error.problem}") from None


def _read(document: object) -> Policy:
    top = _table(document, "", {"name", "cc_mode", "max_evidence_age_seconds", "boot", "gpu"})
    boot = _table(top["boot"], "boot", {"pcrs"}, optional={"secure_boot_required"})
    gpu = _table(top["gpu"], "gpu", {"measurements", "evidence"}, optional={"ocsp_max_age_seconds"})

    name = _name(top["name"], "name")
    cc_mode = _name(top["cc_mode"], "cc_mode")
    validation.one_of(cc_mode, "cc_mode", CC_MODES)
    max_age = validation.integer(
        top["max_evidence_age_seconds"], "max_evidence_age_seconds", minimum=1, maximum=MAX_EVIDENCE_AGE_SECONDS
    )

    pcrs = validation.mapping(
        boot["pcrs"], "boot.pcrs", min_items=1, expected="a non-empty table of boot component -> PCR index"
    )
    boot_pcrs = {}
    for component, pcr in pcrs.items():
        key = validation.at("boot.pcrs", component)
        _name(component, key)
        boot_pcrs[component] = validation.integer(
            pcr, key, minimum=0, maximum=PCR_COUNT - 1, expected=f"a PCR index from 0 to {PCR_COUNT - 1}"
        )

    secure_boot_required = bool(  # one_of has refused anything but True and False
        validation.one_of(boot.get("secure_boot_required", False), "boot.secure_boot_required", (True, False))
    )
    if secure_boot_required and SECURE_BOOT_PCR not in boot_pcrs.values():
        raise PolicyError(
            f"'boot.secure_boot_required' needs PCR {SECURE_BOOT_PCR} quoted, where Secure Boot's state is"
            f" measured: assign its component to it in boot.pcrs (secureboot = {SECURE_BOOT_PCR})"
        )

    measurements = validation.sequence(
        gpu["measurements"], "gpu.measurements", expected="an array of measurement names"
    )
    for position, measurement in enumerate(measurements):
        _name(measurement, validation.at("gpu.measurements", position))
    if len(set(measurements)) != len(measurements):
        raise PolicyError("'gpu.measurements' names a measurement twice")

    evidence = validation.one_of(gpu["evidence"], "gpu.evidence", tuple(GPU_EVIDENCE))
    ocsp_max_age = gpu.get("ocsp_max_age_seconds")
    if ocsp_max_age is not None:
        ocsp_max_age = validation.integer(
            ocsp_max_age, "gpu.ocsp_max_age_seconds", minimum=0, maximum=MAX_OCSP_AGE_SECONDS
        )

    return Policy(
        name=name,
        cc_mode=cc_mode,
        max_evidence_age_seconds=max_age,
        boot_pcrs=MappingProxyType(boot_pcrs),
        gpu_measurements=tuple(measurements),
        gpu_evidence=GPU_EVIDENCE[str(evidence)],
        secure_boot_required=secure_boot_required,
        ocsp_max_age_seconds=ocsp_max_age,
    )


def _table(value: object, where: str, keys: set[str], optional: Set[str] = frozenset()) -> dict[str, object]:
    table = validation.mapping(value, where, expected="a table")
    prefix = f"{where}." if where else ""
    unknown = sorted(str(k) for k in table.keys() - keys - optional)
    if unknown:
        allowed = ", ".join(sorted(keys | optional))
        raise PolicyError(f"unknown key '{prefix}{unknown[0]}': allowed keys are {allowed}")
    missing = sorted(keys - table.keys())
    if "cc_mode" in missing:
        raise PolicyError(
            "missing key 'cc_mode': a policy must state the confidential-computing mode every GPU must report"
            f" ({', '.join(CC_MODES)}); it is never assumed to be off"
        )
    if "evidence" in missing:
        raise PolicyError(
            f"missing key '{prefix}evidence': a policy must state where the GPUs' SPDM evidence must come from"
            f" ({', '.join(GPU_EVIDENCE)}); none is never assumed"
        )
    if missing:
        raise PolicyError(f"missing key '{prefix}{missing[0]}'")
    return table


def _name(value: object, key: str) -> str:
    return validation.text(value, key, max_length=MAX_NAME_LENGTH)
