"""A policy that requires Secure Boot (boot.secure_boot_required), against genuine bmcsim evidence
that quotes PCR 7: a boot with Secure Boot on affirms; one with it off, or without its measurement,
fails `secure_boot_off`, whatever the reference values accept. Without the key, a policy requires
nothing of Secure Boot, as every policy did before the key existed."""

from __future__ import annotations

import copy
import hashlib

import pytest

from attestation import ear
from attestation.policy import SECURE_BOOT_PCR, Policy, load_policy
from attestation.reference import ReferenceValues, parse_manifest, reference_values
from attestation.verifier import SECURE_BOOT_MEASURED, Failure
from bmcsim import evidence, releases
from bmcsim.state import NodeState
from tests.attestation.test_verifier import DEFAULT_POLICY, NOW, World
from tests.support.measured_boot import efi_variable

QUOTED_PCRS = (0, 4, 7, 8, 9)  # bmcsim --quoted-pcrs 0,4,7,8,9
SECURE_BOOT_OFF = Failure("secure_boot_off", "secureboot", "Enabled", "Disabled")


def policy(*, requiring_secure_boot: bool) -> Policy:
    """The shipped policy with `secureboot` measured in PCR 7, and its commented-out key set or not."""
    text = DEFAULT_POLICY.read_text()
    text = text.replace("cmdline = 8 }", f"cmdline = 8, secureboot = {SECURE_BOOT_PCR} }}")
    if requiring_secure_boot:
        text = text.replace("# secure_boot_required = true", "secure_boot_required = true")
    loaded = load_policy(text, format="toml")
    assert loaded.quoted_pcrs == QUOTED_PCRS and loaded.secure_boot_required == requiring_secure_boot
    return loaded


def reference(*, accepting_secure_boot_off: bool = False) -> ReferenceValues:
    """bmcsim's golden digests with PCR 7 quoted: the SecureBoot variable enabled, and disabled too if asked."""
    manifest = releases.reference_values(QUOTED_PCRS)
    if accepting_secure_boot_off:
        disabled = {"release": "SecureBoot disabled", "digest": releases.secure_boot_digest(False)}
        manifest["boot"]["components"][releases.SECURE_BOOT_COMPONENT].append(disabled)
    return reference_values(parse_manifest(manifest))


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World.of_one_node(
        tmp_path_factory.mktemp("bmcsim-pki"), policy=policy(requiring_secure_boot=True), reference=reference()
    )


def evidence_of_a_boot(world: World, *, secure_boot: bool) -> dict:
    """The evidence of a node booted with SecureBootEnable as given: the boot measures it into PCR 7."""
    node = NodeState(world.spec)
    node.secure_boot_enable = secure_boot
    node.reset("ForceRestart", NOW.timestamp(), 0.0)
    return copy.deepcopy(evidence.collect(node, world.pki, world.nonce, NOW.timestamp(), QUOTED_PCRS))


def test_a_boot_with_secure_boot_on_affirms(world):
    verdict = world.verify(evidence_of_a_boot(world, secure_boot=True))
    assert verdict.affirming, verdict.failures
    assert verdict.measurements["secureboot"] == releases.secure_boot_digest(True)


def test_a_boot_with_secure_boot_off_fails_secure_boot_off_even_where_the_reference_values_accept_it(world):
    off = evidence_of_a_boot(world, secure_boot=False)
    verdict = world.verify(off, reference=reference(accepting_secure_boot_off=True))
    assert verdict.failures == (SECURE_BOOT_OFF,)
    assert ear.trustworthiness_vector(verdict)["configuration"] == ear.CONTRAINDICATED

    # Where the reference values list only the enabled variable, its digest is unknown as well.
    verdict = world.verify(off)
    assert SECURE_BOOT_OFF in verdict.failures
    assert {f.code for f in verdict.failures} == {"secure_boot_off", "unknown_component_digest"}


def test_a_boot_without_the_secure_boot_measurement_fails_not_measured(world):
    document = evidence_of_a_boot(world, secure_boot=True)
    log = [event for event in document["event_log"] if event["pcr"] != SECURE_BOOT_PCR]
    world.requote(document, log=log, pcrs=evidence.replay(log, QUOTED_PCRS))  # a TPM that quoted an empty PCR 7
    verdict = world.verify(document)
    assert Failure("secure_boot_off", "secureboot", "Enabled", "not measured") in verdict.failures
    assert {f.code for f in verdict.failures} == {"secure_boot_off", "missing_component"}


def test_secure_boot_claimed_in_the_log_but_not_in_the_quote_fails_on_the_quote(world):
    document = evidence_of_a_boot(world, secure_boot=False)
    claimed = next(e for e in document["event_log"] if e["pcr"] == SECURE_BOOT_PCR)
    claimed["digest"] = releases.secure_boot_digest(True)  # the TPM measured it disabled
    verdict = world.verify(document)
    assert [f.code for f in verdict.failures] == ["pcr_digest"]


def test_without_the_key_a_policy_requires_nothing_of_secure_boot(world):
    off = evidence_of_a_boot(world, secure_boot=False)
    verdict = world.verify(
        off, policy=policy(requiring_secure_boot=False), reference=reference(accepting_secure_boot_off=True)
    )
    assert verdict.affirming, verdict.failures


def test_the_verifier_reads_the_secure_boot_variable_as_uefi_firmware_measures_it():
    measured = {hashlib.sha256(efi_variable("SecureBoot", value)).digest() for value in (b"\x01", b"\x00")}
    assert set(SECURE_BOOT_MEASURED) == measured
    as_bmcsim_measures_it = {
        bytes.fromhex(releases.secure_boot_digest(True)): "Enabled",
        bytes.fromhex(releases.secure_boot_digest(False)): "Disabled",
    }
    assert as_bmcsim_measures_it == SECURE_BOOT_MEASURED
