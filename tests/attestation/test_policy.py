"""The policy loader: the shipped policy loads; every deviation from the schema is an error naming the key."""

from __future__ import annotations

import json
import tomllib

import pytest

from attestation.policy import PolicyError, load_policy, load_policy_file
from tests.support import REPO_ROOT

DEFAULT_POLICY = REPO_ROOT / "attestation" / "policies" / "default.toml"


def default_document() -> dict:
    return tomllib.loads(DEFAULT_POLICY.read_text())


def test_the_shipped_policy_demands_cc_mode_on_and_the_whole_boot_chain():
    policy = load_policy_file(DEFAULT_POLICY)
    assert policy.name == "default"
    assert policy.cc_mode == "on"
    assert policy.max_evidence_age_seconds == 300
    assert dict(policy.boot_pcrs) == {"firmware": 0, "bootloader": 4, "kernel": 9, "initrd": 9, "cmdline": 8}
    assert policy.quoted_pcrs == (0, 4, 8, 9)
    assert policy.gpu_measurements == ("vbios", "driver")
    assert policy.gpu_evidence == ("in_band", "out_of_band")  # "both"
    assert policy.ocsp_max_age_seconds is None  # only a current OCSP answer counts
    assert policy.secure_boot_required is False  # an optional key: absent, Secure Boot is not required


@pytest.mark.parametrize(
    ("evidence", "sources"),
    [("in_band", ("in_band",)), ("out_of_band", ("out_of_band",)), ("both", ("in_band", "out_of_band"))],
)
def test_a_policy_names_where_the_gpus_spdm_evidence_must_come_from(evidence, sources):
    document = default_document()
    document["gpu"].update(evidence=evidence, ocsp_max_age_seconds=3600)
    policy = load_policy(json.dumps(document), format="json")
    assert (policy.gpu_evidence, policy.ocsp_max_age_seconds) == (sources, 3600)


def test_a_policy_silent_on_the_gpus_evidence_is_rejected_not_read_as_none():
    document = default_document()
    del document["gpu"]["evidence"]
    with pytest.raises(PolicyError, match=r"missing key 'gpu.evidence'.*in_band, out_of_band, both.*never assumed"):
        load_policy(json.dumps(document), format="json")


def test_a_real_servers_policy_asks_for_no_simulated_gpu_reports():
    document = default_document()
    document["gpu"]["measurements"] = []
    assert load_policy(json.dumps(document), format="json").gpu_measurements == ()


def test_a_policy_can_require_secure_boot_measured_in_a_quoted_pcr_7():
    document = default_document()
    document["boot"]["pcrs"]["secureboot"] = 7
    document["boot"]["secure_boot_required"] = True
    policy = load_policy(json.dumps(document), format="json")
    assert policy.secure_boot_required is True and 7 in policy.quoted_pcrs


def test_json_loads_the_same_policy():
    assert load_policy(json.dumps(default_document()), format="json") == load_policy_file(DEFAULT_POLICY)


def test_a_policy_without_the_confidential_computing_requirement_is_rejected_not_read_as_off():
    document = default_document()
    del document["cc_mode"]
    with pytest.raises(PolicyError, match=r"missing key 'cc_mode'.*never assumed to be off"):
        load_policy(json.dumps(document), format="json")


def test_the_same_omission_in_toml_is_rejected_with_the_same_message():
    text = "\n".join(line for line in DEFAULT_POLICY.read_text().splitlines() if not line.startswith("cc_mode"))
    with pytest.raises(PolicyError, match=r"missing key 'cc_mode'.*never assumed to be off"):
        load_policy(text, format="toml")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(cc_mdoe="on"), r"unknown key 'cc_mdoe'"),
        (lambda d: d["boot"].update(hash="sha1"), r"unknown key 'boot.hash'"),
        (lambda d: d.update(max_evidence_age_seconds="300"), r"'max_evidence_age_seconds' must be an integer"),
        (lambda d: d.update(max_evidence_age_seconds=True), r"'max_evidence_age_seconds' must be an integer"),
        (lambda d: d.update(max_evidence_age_seconds=0), r"'max_evidence_age_seconds' must be from 1"),
        (lambda d: d.update(cc_mode=False), r"'cc_mode' must be a string"),
        (lambda d: d.update(cc_mode="sometimes"), r"'cc_mode' must be one of on, off, devtools"),
        (lambda d: d.update(name=""), r"'name' must be 1 to 64 characters"),
        (lambda d: d.pop("boot"), r"missing key 'boot'"),
        (lambda d: d["gpu"].pop("measurements"), r"missing key 'gpu.measurements'"),
        (lambda d: d["boot"].update(pcrs={}), r"'boot.pcrs' must be a non-empty table"),
        (lambda d: d["boot"]["pcrs"].update(kernel="9"), r"'boot.pcrs.kernel' must be an integer"),
        (lambda d: d["boot"]["pcrs"].update(kernel=24), r"'boot.pcrs.kernel' must be a PCR index from 0 to 23"),
        (lambda d: d["gpu"].update(measurements="vbios"), r"'gpu.measurements' must be an array"),
        (lambda d: d["gpu"].update(evidence="bmc"), r"'gpu.evidence' must be one of in_band, out_of_band, both"),
        (lambda d: d["gpu"].update(evidence=["in_band"]), r"'gpu.evidence' must be one of"),
        (lambda d: d["gpu"].update(ocsp_max_age_seconds=-1), r"'gpu.ocsp_max_age_seconds' must be from 0"),
        (lambda d: d["gpu"].update(ocsp_max_age_seconds="1h"), r"'gpu.ocsp_max_age_seconds' must be an integer"),
        (lambda d: d["gpu"].update(ocsp=True), r"unknown key 'gpu.ocsp'"),
        (lambda d: d["gpu"].update(measurements=["vbios", 3]), r"'gpu.measurements\[1\]' must be a string"),
        (lambda d: d["gpu"].update(measurements=["vbios", "vbios"]), r"names a measurement twice"),
        (lambda d: d.update(gpu=["vbios"]), r"'gpu' must be a table"),
        (lambda d: d["boot"].update(secure_boot="required"), r"unknown key 'boot.secure_boot': allowed keys are pcrs"),
        (lambda d: d.update(secure_boot_required=True), r"unknown key 'secure_boot_required'"),
        (lambda d: d["boot"].update(secure_boot_required="yes"), r"'boot.secure_boot_required' must be one of"),
        (lambda d: d["boot"].update(secure_boot_required=1), r"'boot.secure_boot_required' must be one of"),
        (lambda d: d["boot"].update(secure_boot_required=True), r"'boot.secure_boot_required' needs PCR 7 quoted"),
    ],
)
def test_a_policy_off_the_schema_is_rejected_naming_the_key(change, message):
    document = default_document()
    change(document)
    with pytest.raises(PolicyError, match=message):
        load_policy(json.dumps(document), format="json")


@pytest.mark.parametrize(
    ("text", "format", "message"),
    [
        ("name = ", "toml", "not valid TOML"),
        ("{", "json", "not valid JSON"),
        ("[]", "json", "the policy must be a table"),
        ("name: x", "yaml", "unknown policy format 'yaml'"),
    ],
)
def test_text_that_is_no_policy_is_rejected(text, format, message):
    with pytest.raises(PolicyError, match=message):
        load_policy(text, format=format)


def test_a_policy_file_names_itself_in_errors_and_needs_a_known_suffix(tmp_path):
    broken = tmp_path / "gpu-nodes.toml"
    broken.write_text(DEFAULT_POLICY.read_text().replace('cc_mode = "on"', ""))
    with pytest.raises(PolicyError, match=rf"{broken}: missing key 'cc_mode'"):
        load_policy_file(broken)
    with pytest.raises(PolicyError, match=r"must end in .toml or .json"):
        load_policy_file(tmp_path / "policy.yaml")
    with pytest.raises(PolicyError, match=r"cannot read the policy"):
        load_policy_file(tmp_path / "absent.json")
