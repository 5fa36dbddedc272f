"""The GPUs' SPDM evidence in the appraisal: in band (the agent's gpu_spdm) and out of band (the
BMC's ComponentIntegrity), as the policy requires, each checked against the device root, the RIMs
and revocation, and what each came to listed per GPU in the verdict and the signed result."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation import ear
from attestation.policy import Policy, load_policy
from attestation.verifier.gpu_evidence import CandidateRim
from bmcsim import gpu_rims, releases, spdm
from bmcsim.state import NodeState
from tests.attestation import test_verifier
from tests.attestation.test_verifier import DEFAULT_POLICY, NOW, World, codes

world = test_verifier.world  # the fixture, by assignment: an imported name that arguments shadow is a lint error

FACTORY_DRIVER = gpu_rims.FACTORY_DRIVER


def policy(**gpu) -> Policy:
    document = tomllib.loads(DEFAULT_POLICY.read_text())
    document["gpu"].update(gpu)
    return load_policy(json.dumps(document), format="json")


def faulty(world: World, kind: str, gpu: int) -> NodeState:
    node = NodeState(world.spec)
    node.faults.append({"kind": kind, "gpu": gpu})
    return node


def test_a_clean_node_affirms_with_every_gpus_evidence_from_both_sources(world):
    verdict = world.verify(world.collect())
    assert verdict.affirming, verdict.failures
    assert [(g.index, g.source, g.status) for g in verdict.gpu_evidence] == [
        *((i, "in_band", "affirming") for i in range(8)),
        *((i, "out_of_band", "affirming") for i in range(8)),
    ]
    assert {tuple(sorted(g.versions.items())) for g in verdict.gpu_evidence} == {
        (("driver", FACTORY_DRIVER), ("vbios", releases.GPU_RELEASES["vbios"][-1]))
    }


@pytest.mark.parametrize(("evidence", "sources"), [("in_band", {"in_band"}), ("out_of_band", {"out_of_band"})])
def test_a_policy_asking_one_source_reads_only_that_one(world, evidence, sources):
    document = world.collect()
    if evidence == "in_band":
        verdict = world.verify(document, policy=policy(evidence=evidence), bmc_evidence=None)
    else:
        del document["gpu_spdm"]
        verdict = world.verify(document, policy=policy(evidence=evidence))
    assert verdict.affirming, verdict.failures
    assert {g.source for g in verdict.gpu_evidence} == sources


@pytest.mark.parametrize(
    ("kind", "code", "component"),
    [
        (spdm.TAMPER, "gpu_measurement", "gpu3.{source}.vbios"),
        (spdm.WRONG_NONCE, "gpu_nonce", "gpu3.{source}"),
        (spdm.BROKEN_CHAIN, "gpu_chain", "gpu3.{source}"),
    ],
)
def test_a_gpu_fault_contraindicates_that_gpu_from_both_sources_with_its_reason(world, kind, code, component):
    node = faulty(world, kind, 3)
    verdict = world.verify(world.collect(node), bmc_evidence=world.bmc_evidence(node))
    assert codes(verdict) == {code}
    assert {f.component for f in verdict.failures} == {component.format(source=s) for s in ("in_band", "out_of_band")}
    failing = {(g.index, g.source) for g in verdict.gpu_evidence if g.status == "contraindicated"}
    assert failing == {(3, "in_band"), (3, "out_of_band")}


def test_a_vbios_implant_that_only_the_bmc_sees_fails_out_of_band(world):
    """What an OS that lies about its GPUs can do: send a clean node's reports in band. The BMC's
    reading, which the OS cannot touch, still names the changed VBIOS measurement."""
    node = faulty(world, spdm.TAMPER, 5)
    verdict = world.verify(world.collect(), bmc_evidence=world.bmc_evidence(node))
    assert [(f.code, f.component) for f in verdict.failures] == [("gpu_measurement", "gpu5.out_of_band.vbios")]
    assert "index 9: measured" in verdict.failures[0].found  # SPDM block 10 is the RIM's index 9


def test_a_retired_driver_fails_every_gpu_naming_the_release(world):
    retired = dataclasses.replace(
        world.gpu_references,
        rims=lambda kind, version: [
            dataclasses.replace(rim, retired=kind == "driver") for rim in world.gpu_references.rims(kind, version)
        ],
    )
    verdict = world.verify(world.collect(), gpu_references=retired)
    assert codes(verdict) == {"release_retired"}
    assert {f.found for f in verdict.failures} == {f"driver {FACTORY_DRIVER} (retired)"}
    assert len(verdict.failures) == 16


def test_without_the_rim_of_the_release_a_gpu_is_not_known_good(world):
    vbios_only = dataclasses.replace(
        world.gpu_references,
        rims=lambda kind, version: world.gpu_references.rims(kind, version) if kind == "vbios" else [],
    )
    verdict = world.verify(world.collect(), gpu_references=vbios_only)
    assert codes(verdict) == {"gpu_rim"}
    assert {(f.component.split(".", 2)[-1], f.found) for f in verdict.failures} == {("driver", "none imported")}


def test_a_rim_not_signed_under_the_rim_root_is_refused(world):
    forged = dataclasses.replace(
        world.gpu_references,
        rims=lambda kind, version: [
            CandidateRim(rim.name, rim.xml.replace(b'Entity name="bmcsim"', b'Entity name="mallory"', 1))
            for rim in world.gpu_references.rims(kind, version)
        ],
    )
    verdict = world.verify(world.collect(), gpu_references=forged)
    assert codes(verdict) == {"gpu_rim"}
    assert all("signature: the RIM was changed after it was signed" in f.found for f in verdict.failures)


def test_missing_revocation_data_contraindicates_and_is_asked_only_of_chains_verified_to_the_root(world):
    asked = []

    def no_answers(chain):
        asked.append(chain)
        return [f"revocation: no OCSP answer for {chain[0].subject.rfc4514_string()}"]

    node = faulty(world, spdm.BROKEN_CHAIN, 1)
    references = dataclasses.replace(world.gpu_references, revocation=no_answers)
    verdict = world.verify(world.collect(node), gpu_references=references, bmc_evidence=world.bmc_evidence(node))
    assert codes(verdict) == {"gpu_chain", "gpu_revocation"}
    revoked = {f.component for f in verdict.failures if f.code == "gpu_revocation"}
    # Every source of every GPU: its device chain (not GPU 1's forged one) and its two RIMs' chains.
    assert {c for c in revoked if c.count(".") == 1} == {
        f"gpu{i}.{s}" for i in range(8) if i != 1 for s in ("in_band", "out_of_band")
    }
    assert {c.rsplit(".", 1)[1] for c in revoked if c.count(".") == 2} == {"driver", "vbios"}
    assert all(chain[-1] in (world.pki.device_identity_ca, world.pki.rim_root) for chain in asked)
    assert len(asked) == 14 + 16 * 2


def test_evidence_the_policy_requires_but_a_gpu_cannot_give_fails_with_its_reason(world):
    document = world.collect()
    document["gpu_spdm"][2] = {
        "index": 2,
        "uuid": world.spec.gpus[2].uuid,
        "status": "unavailable",
        "reason": "nvml: not supported",
    }
    bmc = world.bmc_evidence()
    del bmc[4]
    verdict = world.verify(document, bmc_evidence=bmc)
    assert [(f.code, f.component, f.found) for f in verdict.failures] == [
        ("gpu_evidence", "gpu2.in_band", "unavailable: nvml: not supported"),
        ("gpu_evidence", "gpu4.out_of_band", "unavailable: none given"),
    ]
    assert {(g.index, g.source, g.status) for g in verdict.gpu_evidence if g.status != "affirming"} == {
        (2, "in_band", "unavailable"),
        (4, "out_of_band", "unavailable"),
    }


def test_another_gpus_evidence_is_refused_on_inventory(world):
    bmc = world.bmc_evidence()
    bmc[6]["uuid"] = "00000000-0000-0000-0000-000000000000"
    verdict = world.verify(world.collect(), bmc_evidence=bmc)
    assert codes(verdict) == {"gpu_inventory", "gpu_evidence"}


def test_the_signed_result_lists_each_gpus_evidence(world):
    node = faulty(world, spdm.TAMPER, 0)
    verdict = world.verify(world.collect(), bmc_evidence=world.bmc_evidence(node))
    key = Ed25519PrivateKey.generate()
    token = ear.sign_result(
        verdict=verdict, node="node-001", nonce=world.nonce, verifier_id="test", private_key=key, kid="k", now=NOW
    )
    claims = jwt.decode(token, key.public_key(), algorithms=["EdDSA"])
    entries = {(g["index"], g["gpu_evidence"]["source"]): g for g in claims["gpus"]}
    assert len(entries) == 16
    tampered = entries[(0, "out_of_band")]["gpu_evidence"]
    assert tampered["status"] == "contraindicated"
    assert [f["code"] for f in tampered["failures"]] == ["gpu_measurement"]
    assert entries[(0, "in_band")]["gpu_evidence"] == {
        "source": "in_band",
        "status": "affirming",
        "failures": [],
        "versions": {"driver": FACTORY_DRIVER, "vbios": releases.GPU_RELEASES["vbios"][-1]},
    }
    assert claims["submods"]["node-001"]["ear.trustworthiness-vector"]["executables"] == ear.CONTRAINDICATED
