"""The host backend's TPM evidence, from a real TPM 2.0, affirmed by the control plane's verifier.

swtpm stands in for the server's TPM (tests/support/swtpm.py: without swtpm and tpm2-tools these
tests fail, never skip). The agent creates its AK there, a test manufacturer CA certifies it,
and a measured boot is simulated as firmware and GRUB do it: each event's digests extended into
swtpm's PCRs and logged in the binary TCG crypto-agile format the kernel serves at
/sys/kernel/security/tpm0/binary_bios_measurements. The evidence then goes through
attestation.verifier.verify with the anchors, reference values and shipped policy the control
plane appraises with. The agent names every event of a quoted PCR for the boot component that
PCR holds (agent/host/tpm.py says why), so the known-good manifest lists separators and GRUB's
commands as well as images. The node has no GPUs enrolled and reports none, so the GPU checks
have nothing to appraise: this is the TPM half of a host's evidence. The measured boot and the PKI
are in tests/support/measured_boot.py and tests/support/ak_certificates.py.
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from datetime import UTC, datetime

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from django.conf import settings

from agent.backend import Refused, Unavailable
from agent.host.tpm import EVENT_TYPE_NAMES, TPMError, TPMQuoter, create_attestation_key, parse_event_log
from attestation.policy import load_policy_file
from attestation.reference import parse_manifest, reference_values
from attestation.verifier import TrustedRoots, Verdict, new_nonce, verify
from tests.support.ak_certificates import NODE, ak_certificate, public_pem
from tests.support.measured_boot import (
    EV_NO_ACTION,
    KNOWN_GOOD_BOOT,
    TPM_ALG_SHA1,
    TPM_ALG_SHA256,
    boot,
    event_log,
    known_good_manifest,
    linux_boot,
    spec_id_event,
)

AK_HANDLE = 0x81010002


@pytest.fixture
def quoter(tpm, tmp_path, manufacturer_ca) -> TPMQuoter:
    """A node as installed: its AK created by the agent and certified by the manufacturer CA."""
    ak_public_pem = create_attestation_key(tcti=tpm.tcti, handle=AK_HANDLE)
    ak_cert_path = tmp_path / "ak.crt"
    ak_cert_path.write_text(ak_certificate(ak_public_pem, manufacturer_ca))
    return TPMQuoter(
        ak_cert_path=ak_cert_path,
        tcti=tpm.tcti,
        ak=f"{AK_HANDLE:#x}",
        event_log_path=tmp_path / "binary_bios_measurements",
    )


def appraise(quoter: TPMQuoter, roots: TrustedRoots, manifest: dict) -> Verdict:
    """The control plane's appraisal of the evidence the agent gives for a fresh nonce."""
    now = datetime.now(UTC)
    nonce = new_nonce(now)
    evidence = {"quote": quoter.quote(nonce), "event_log": quoter.event_log(), "gpus": []}
    return verify(
        evidence=json.loads(json.dumps(evidence)),  # as it crosses HTTP
        nonce=nonce,
        node=NODE,
        reference=reference_values(parse_manifest(manifest)),
        policy=load_policy_file(settings.ATTESTATION_POLICY_FILE),
        roots=roots,
        now=now,
    )


# A boot as it happened, and as it did not.


def test_the_evidence_of_a_known_good_boot_is_affirmed(tpm, quoter, roots):
    boot(tpm, quoter.event_log_path, KNOWN_GOOD_BOOT)

    verdict = appraise(quoter, roots, known_good_manifest(KNOWN_GOOD_BOOT))

    assert verdict.failures == ()
    assert verdict.affirming
    assert set(verdict.measurements.values()) == {
        m.digests[TPM_ALG_SHA256].hex() for m in KNOWN_GOOD_BOOT if m.component is not None
    }


def test_a_pcr_extended_after_boot_no_longer_matches_the_log_and_is_contraindicated(tpm, quoter, roots):
    boot(tpm, quoter.event_log_path, KNOWN_GOOD_BOOT)
    tpm.run("tpm2_pcrextend", f"9:sha256={hashlib.sha256(b'a module loaded behind the log').hexdigest()}")

    verdict = appraise(quoter, roots, known_good_manifest(KNOWN_GOOD_BOOT))

    assert not verdict.affirming
    assert [(f.code, f.component) for f in verdict.failures] == [("pcr_digest", "quote.attest")]


def test_a_kernel_the_reference_values_do_not_list_is_contraindicated(tpm, quoter, roots):
    implanted = linux_boot(b"vmlinuz-6.8.0-49-generic bzImage with an implant")
    boot(tpm, quoter.event_log_path, implanted)

    verdict = appraise(quoter, roots, known_good_manifest(KNOWN_GOOD_BOOT))

    assert [(f.code, f.component, f.found) for f in verdict.failures] == [
        (
            "unknown_component_digest",
            "kernel",
            hashlib.sha256(b"vmlinuz-6.8.0-49-generic bzImage with an implant").hexdigest(),
        )
    ]


# The event log.


def test_the_event_log_gives_each_extended_event_of_a_quoted_pcr_named_for_its_component(tpm, quoter):
    boot(tpm, quoter.event_log_path, KNOWN_GOOD_BOOT)

    entries = quoter.event_log()

    assert [(e["pcr"], e["digest"], e["component"]) for e in entries] == [
        (m.pcr, m.digests[TPM_ALG_SHA256].hex(), m.component) for m in KNOWN_GOOD_BOOT if m.component is not None
    ]  # neither the EV_NO_ACTION event nor PCR 7's
    descriptions = [e["description"] for e in entries]
    assert descriptions[:4] == [
        "EV_S_CRTM_VERSION GF-BIOS 2.4.0",
        "EV_EFI_PLATFORM_FIRMWARE_BLOB2 Fv(PEI)",
        "EV_EFI_PLATFORM_FIRMWARE_BLOB2 Fv(DXE)",
        "EV_EFI_ACTION Calling EFI Application from Boot Option",
    ]
    assert "EV_SEPARATOR" in descriptions
    assert r"EV_EFI_BOOT_SERVICES_APPLICATION \EFI\ubuntu\shimx64.efi" in descriptions
    assert "EV_IPL /initrd.img-6.8.0-49-generic" in descriptions


def test_the_event_log_reads_as_tpm2_eventlog_reads_it(tmp_path):
    """tpm2-tools' own parser, an independent reading of the writer's bytes and of ours: it also checks the
    digests of the events whose data is what was measured (separators, variables, GRUB's strings)."""
    path = tmp_path / "binary_bios_measurements"
    path.write_bytes(event_log(KNOWN_GOOD_BOOT))

    result = subprocess.run(["tpm2_eventlog", str(path)], capture_output=True, text=True, timeout=30)

    assert (result.returncode, result.stderr) == (0, "")
    theirs = yaml.safe_load(result.stdout)
    assert [
        (e["PCRIndex"], e["EventType"], {d["AlgorithmId"]: d["Digest"] for d in e["Digests"]})
        for e in theirs["events"][1:]
    ] == [
        (
            e.pcr,
            EVENT_TYPE_NAMES[e.event_type],
            {"sha1": e.digests[TPM_ALG_SHA1].hex(), "sha256": e.digests[TPM_ALG_SHA256].hex()},
        )
        for e in parse_event_log(path.read_bytes())
    ]


# Keys, and what goes wrong.


def test_an_ak_loaded_from_a_context_file_is_flushed_after_each_quote(tpm, tmp_path, manufacturer_ca):
    """Without a resource manager a loaded AK stays in the TPM: unflushed, the fourth quote finds no room."""
    tpm.run("tpm2_createek", "-c", "ek.ctx", "-G", "rsa")
    tpm.run(
        "tpm2_createak", "-C", "ek.ctx", "-c", "ak.ctx", "-G", "ecc", "-g", "sha256", "-s", "ecdsa",
        "-u", "ak.pem", "-f", "pem",
    )  # fmt: skip
    cert_path = tmp_path / "ak.crt"
    cert_path.write_text(ak_certificate((tpm.directory / "ak.pem").read_text(), manufacturer_ca))
    quoter = TPMQuoter(ak_cert_path=cert_path, tcti=tpm.tcti, ak=str(tpm.directory / "ak.ctx"))

    quotes = [quoter.quote(bytes([n]) * 32) for n in range(5)]

    assert len({q["attest"] for q in quotes}) == 5
    assert tpm.run("tpm2_getcap", "handles-transient").strip() == ""


def test_the_ak_is_persisted_and_nothing_else_stays_loaded_in_a_tpm_without_resource_manager(tpm, quoter):
    assert f"{AK_HANDLE:#x}" in tpm.run("tpm2_getcap", "handles-persistent")
    assert tpm.run("tpm2_getcap", "handles-transient").strip() == ""


def test_creating_the_ak_again_at_its_handle_is_refused(tpm, quoter):
    with pytest.raises(TPMError, match=f"persistent handle {AK_HANDLE:#x} already holds an object"):
        create_attestation_key(tcti=tpm.tcti, handle=AK_HANDLE)


def test_a_missing_event_log_is_a_clear_error(tmp_path):
    quoter = TPMQuoter(ak_cert_path=tmp_path / "ak.crt", event_log_path=tmp_path / "binary_bios_measurements")

    with pytest.raises(TPMError, match=r"no measured-boot event log at .*/binary_bios_measurements") as raised:
        quoter.event_log()
    assert isinstance(raised.value, Unavailable)  # the agent answers 503


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "byte 0 starts a field of 4 bytes but only 0 follow"),
        (bytes(range(256)) * 4, "does not start with a Spec ID Event03 header"),
        (
            struct.pack("<II", 0, EV_NO_ACTION) + bytes(20) + struct.pack("<I", 24) + b"Spec ID Event00\0" + bytes(8),
            "does not start with a Spec ID Event03 header",
        ),
        (spec_id_event({TPM_ALG_SHA1: 20}), "its header declares no SHA-256 bank"),
        (event_log(KNOWN_GOOD_BOOT)[:-3], "starts a field of 29 bytes but only 26 follow"),  # the initrd's path
        (event_log(KNOWN_GOOD_BOOT) + bytes(12), "carries 0 digests; the header declares 2 banks"),
    ],
    ids=["empty", "garbage", "sha1-only", "no-sha256-bank", "truncated", "zero-padded"],
)
def test_an_event_log_that_is_not_one_is_a_clear_error(tmp_path, content, says):
    path = tmp_path / "binary_bios_measurements"
    path.write_bytes(content)
    quoter = TPMQuoter(ak_cert_path=tmp_path / "ak.crt", event_log_path=path)

    with pytest.raises(TPMError, match=f"is not a TCG crypto-agile event log: .*{says}"):
        quoter.event_log()


def test_a_tcti_with_no_tpm_behind_it_is_a_clear_error(tmp_path, manufacturer_ca):
    some_key = ec.generate_private_key(ec.SECP256R1()).public_key()
    ak_cert_path = tmp_path / "ak.crt"
    ak_cert_path.write_text(ak_certificate(public_pem(some_key), manufacturer_ca))
    wrong = TPMQuoter(ak_cert_path=ak_cert_path, tcti="swtpm:host=127.0.0.1,port=1")

    with pytest.raises(TPMError, match=r"tpm2_quote failed \(exit 1, TCTI swtpm:host=127.0.0.1,port=1\): .*tcti"):
        wrong.quote(bytes(32))


def test_a_missing_ak_certificate_is_a_clear_error(tmp_path):
    quoter = TPMQuoter(ak_cert_path=tmp_path / "ak.crt")

    with pytest.raises(TPMError, match=r"cannot read the AK certificate .*/ak\.crt: No such file or directory"):
        quoter.quote(bytes(32))


def test_a_nonce_the_tpm_cannot_take_is_refused_as_bad_input(tmp_path):
    quoter = TPMQuoter(ak_cert_path=tmp_path / "ak.crt")

    with pytest.raises(Refused, match="a nonce is 1 to 64 bytes, not 65") as raised:
        quoter.quote(bytes(65))
    assert raised.value.status == 400


def test_an_operator_creates_the_ak_with_the_gpu_agent_command(tpm, tmp_path):
    out = tmp_path / "ak.pub.pem"
    command = [sys.executable, "-m", "agent", "tpm-create-ak", "--tcti", tpm.tcti, "--ak-handle", "0x81010003"]
    created = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=60, check=False)
    assert created.returncode == 0, created.stderr
    assert isinstance(load_pem_public_key(out.read_bytes()), ec.EllipticCurvePublicKey)
    again = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 1 and "already holds an object" in again.stderr and "Traceback" not in again.stderr
    bad = subprocess.run([*command[:-1], "81010003x"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "is not a TPM handle" in bad.stderr
