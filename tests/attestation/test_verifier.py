"""The verifier against genuine bmcsim evidence: every check alone, several at once, and random damage.

Evidence comes from bmcsim's own collection (its PKI in a temp dir, a node's simulated state).
Where a check can only be isolated by a genuine signer doing something wrong (a TPM quoting
another nonce, a GPU signing a foreign measurement), the test re-signs with bmcsim's real keys.
"""

from __future__ import annotations

import base64
import copy
import datetime
import hashlib
from dataclasses import dataclass

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation import ear, verifier
from attestation.policy import Policy, load_policy_file
from attestation.reference import ReferenceValues, parse_manifest, reference_values
from attestation.verifier import GPUIdentity, NodeIdentity, TrustedRoots, gpu_reports, new_nonce, verify
from attestation.verifier.gpu_evidence import GpuReferences
from bmcsim import evidence, releases, tpm
from bmcsim.pki import PKI
from bmcsim.state import NodeState
from bmcsim.store import Store
from core.topology import NodeSpec, default_layout
from tests.support import REPO_ROOT
from tests.support.examples import examples
from tests.support.simulated_gpu_evidence import bmc_gpu_evidence, simulated_gpu_references

DEFAULT_POLICY = REPO_ROOT / "attestation" / "policies" / "default.toml"
NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)


@dataclass
class World:
    pki: PKI
    spec: NodeSpec
    identity: NodeIdentity
    roots: TrustedRoots
    policy: Policy
    reference: ReferenceValues
    nonce: bytes
    gpu_references: GpuReferences

    @classmethod
    def of_one_node(cls, directory, *, policy: Policy, reference: ReferenceValues) -> World:
        """bmcsim's first node with its PKI in `directory`, appraised under `policy` and `reference`."""
        pki = PKI(directory, Store(directory))
        roots = pki.roots()
        spec = default_layout(1)[0]
        return cls(
            pki=pki,
            spec=spec,
            identity=NodeIdentity(
                name=spec.name,
                serial=spec.serial,
                gpus=tuple(GPUIdentity(index=g.index, uuid=g.uuid, serial=g.serial) for g in spec.gpus),
            ),
            roots=TrustedRoots.from_pem(
                manufacturer_ca=roots["manufacturer_ca"], gpu_vendor_root=roots["gpu_vendor_root"]
            ),
            policy=policy,
            reference=reference,
            nonce=new_nonce(NOW - datetime.timedelta(seconds=2)),
            gpu_references=simulated_gpu_references(pki, directory),
        )

    def collect(self, node: NodeState | None = None) -> dict:
        # A copy: bmcsim hands out its cached certificate-chain lists, which a test must not alter.
        return copy.deepcopy(evidence.collect(node or NodeState(self.spec), self.pki, self.nonce, NOW.timestamp()))

    def bmc_evidence(self, node: NodeState | None = None) -> list[dict]:
        return bmc_gpu_evidence(node or NodeState(self.spec), self.pki, self.nonce, NOW.timestamp())

    def verify(self, document: object, **overrides) -> verifier.Verdict:
        arguments = {
            "evidence": document,
            "nonce": self.nonce,
            "node": self.identity,
            "reference": self.reference,
            "policy": self.policy,
            "roots": self.roots,
            "now": NOW,
            "gpu_references": self.gpu_references,
            "bmc_evidence": self.bmc_evidence(),
        }
        return verify(**{**arguments, **overrides})

    def requote(self, document: dict, *, log=None, pcrs=None, nonce=None, key=None, cert=None, mangle=None) -> None:
        """Have a TPM sign a quote over `log` (or other `pcrs`): what a genuine but misused AK would do."""
        ak, ak_pem = self.pki.attestation_key(self.spec.name, self.spec.serial)
        key = key or ak
        log = document["event_log"] if log is None else log
        attest = tpm.quote_attest(
            signer_name=tpm.object_name(key.public_key()),
            nonce=self.nonce if nonce is None else nonce,
            clock_ms=1000,
            reset_count=1,
            restart_count=0,
            firmware_version=evidence.TPM_FIRMWARE_VERSION,
            pcrs=evidence.replay(log) if pcrs is None else pcrs,
        )
        if mangle:
            attest = mangle(attest)
        document["event_log"] = log
        document["quote"] = {
            "attest": b64(attest),
            "signature": b64(key.sign(attest, ec.ECDSA(hashes.SHA256()))),
            "ak_cert": cert or ak_pem,
        }

    def resign_gpu(self, document: dict, index: int, *, key=None, chain=None, **fields) -> None:
        """Have GPU `index` (or another device key) sign its report with `fields` changed."""
        gpu = self.spec.gpus[index]
        genuine_key, genuine_chain = self.pki.gpu_key(gpu.uuid, gpu.serial)
        report = {k: v for k, v in document["gpus"][index].items() if k not in ("signature", "cert_chain")}
        report.update(fields)
        signature = (key or genuine_key).sign(evidence.canonical_gpu_report(report), ec.ECDSA(hashes.SHA384()))
        document["gpus"][index] = {**report, "signature": b64(signature), "cert_chain": chain or genuine_chain}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def rogue_certificate(genuine_pem: str, public_key, curve: ec.EllipticCurve) -> str:
    """A copy of a genuine certificate (same subject and extensions) for `public_key`, from a rogue CA."""
    genuine = x509.load_pem_x509_certificate(genuine_pem.encode())
    rogue_key = ec.generate_private_key(curve)
    builder = (
        x509.CertificateBuilder()
        .subject_name(genuine.subject)
        .issuer_name(genuine.issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(genuine.not_valid_before_utc)
        .not_valid_after(genuine.not_valid_after_utc)
    )
    for extension in genuine.extensions:
        if not isinstance(extension.value, x509.SubjectKeyIdentifier | x509.AuthorityKeyIdentifier):
            builder = builder.add_extension(extension.value, extension.critical)
    hash_algorithm = hashes.SHA384() if isinstance(curve, ec.SECP384R1) else hashes.SHA256()
    return builder.sign(rogue_key, hash_algorithm).public_bytes(Encoding.PEM).decode()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World.of_one_node(
        tmp_path_factory.mktemp("bmcsim-pki"),
        policy=load_policy_file(DEFAULT_POLICY),
        reference=reference_values(parse_manifest(releases.reference_values())),
    )


@pytest.fixture
def genuine(world) -> dict:
    return world.collect()


def codes(verdict: verifier.Verdict) -> set[str]:
    return {failure.code for failure in verdict.failures}


def test_genuine_evidence_affirms_and_shows_what_was_measured(world, genuine):
    verdict = world.verify(genuine)
    assert verdict.affirming and verdict.failures == ()
    assert verdict.measurements["kernel"] == releases.factory_boot_images()["kernel"]
    assert verdict.measurements["gpu7.vbios"] == releases.factory_gpu_measurements()["vbios"]
    assert len(verdict.measurements) == 5 + 8 * 2


def test_implanted_kernel_fails_naming_the_kernel_and_its_digest(world):
    node = NodeState(world.spec)
    node.faults.append({"kind": "implant"})
    node.reset("ForceRestart", NOW.timestamp(), 0.0)  # the implant is measured at the next boot
    verdict = world.verify(world.collect(node))
    assert not verdict.affirming
    (failure,) = verdict.failures
    assert failure.code == "unknown_component_digest" and failure.component == "kernel"
    assert failure.found == releases.implant_kernel_digest(world.spec.name)


def test_cc_mode_off_fails_for_every_gpu(world):
    node = NodeState(world.spec)
    node.faults.append({"kind": "cc_mode", "mode": "off"})
    verdict = world.verify(world.collect(node))
    assert codes(verdict) == {"cc_mode", "gpu_evidence"}
    assert [(f.component, f.expected, f.found) for f in verdict.failures if f.code == "cc_mode"] == [
        (f"gpu{i}", "on", "off") for i in range(8)
    ]
    # NVIDIA's driver gives no attestation report with confidential computing off: none in band.
    assert [(f.component, f.found) for f in verdict.failures if f.code == "gpu_evidence"] == [
        (f"gpu{i}.in_band", "unavailable: confidential_computing_off") for i in range(8)
    ]


def wrong_kernel_pcr(world, document):
    log = copy.deepcopy(document["event_log"])
    next(e for e in log if e["component"] == "cmdline")["pcr"] = 4
    world.requote(document, log=log)


def extra_pcr0_extend(world, document):
    pcrs = evidence.replay(document["event_log"])
    pcrs[0] = tpm.extend(pcrs[0], hashlib.sha256(b"unlogged").digest())
    world.requote(document, pcrs=pcrs)


def gpu_under_rogue_root(world, document):
    gpu = world.spec.gpus[3]
    key = ec.generate_private_key(ec.SECP384R1())
    _, chain = world.pki.gpu_key(gpu.uuid, gpu.serial)
    world.resign_gpu(document, 3, key=key, chain=[rogue_certificate(chain[0], key.public_key(), ec.SECP384R1())])


def ak_from_rogue_ca(world, document):
    key = ec.generate_private_key(ec.SECP256R1())
    _, genuine_pem = world.pki.attestation_key(world.spec.name, world.spec.serial)
    world.requote(document, key=key, cert=rogue_certificate(genuine_pem, key.public_key(), ec.SECP384R1()))


def ak_of_another_node(world, document):
    key, pem = world.pki.attestation_key("node-999", "SN-OTHER")
    world.requote(document, key=key, cert=pem)


def gpu_signed_by_another_gpu(world, document):
    key, chain = world.pki.gpu_key("GPU-00000000-0000-0000-0000-000000000000", "GPU-SN-OTHER")
    world.resign_gpu(document, 2, key=key, chain=chain)


def drop_event(component):
    def alter(world, document):
        world.requote(document, log=[e for e in document["event_log"] if e["component"] != component])

    return alter


def bad_gpu_signature(world, document):
    gpu = world.spec.gpus[5]
    key, _ = world.pki.gpu_key(gpu.uuid, gpu.serial)
    document["gpus"][5]["signature"] = b64(key.sign(b"something else", ec.ECDSA(hashes.SHA384())))


def tamper_event_digest(world, document):
    log = copy.deepcopy(document["event_log"])
    next(e for e in log if e["component"] == "cmdline")["digest"] = hashlib.sha256(b"init=/bin/sh").hexdigest()
    world.requote(document, log=log)


def unknown_vbios(world, document):
    measurements = {**document["gpus"][1]["measurements"], "vbios": hashlib.sha384(b"patched vbios").hexdigest()}
    world.resign_gpu(document, 1, measurements=measurements)


SINGLE_ALTERATIONS = {
    "malformed": lambda world, document: document["quote"].update(attest="not base64!"),
    "ak_chain": ak_from_rogue_ca,
    "ak_identity": ak_of_another_node,
    "quote_format": lambda world, document: world.requote(document, mangle=lambda a: a[:4] + b"\x80\x17" + a[6:]),
    "quote_signature": lambda world, document: world.requote(
        document, key=ec.generate_private_key(ec.SECP256R1()), cert=document["quote"]["ak_cert"]
    ),
    "nonce_mismatch": lambda world, document: world.requote(document, nonce=new_nonce(NOW)),
    "pcr_selection": lambda world, document: world.requote(
        document, pcrs={i: v for i, v in evidence.replay(document["event_log"]).items() if i != 8}
    ),
    "unexpected_event": wrong_kernel_pcr,
    "missing_component": drop_event("initrd"),
    "pcr_digest": extra_pcr0_extend,
    "unknown_component_digest": tamper_event_digest,
    "gpu_chain": gpu_under_rogue_root,
    "gpu_identity": gpu_signed_by_another_gpu,
    "gpu_signature": bad_gpu_signature,
    "gpu_nonce": lambda world, document: world.resign_gpu(document, 6, nonce=new_nonce(NOW).hex()),
    "gpu_measurement": unknown_vbios,
    "cc_mode": lambda world, document: world.resign_gpu(document, 0, cc_mode="devtools"),
    "gpu_inventory": lambda world, document: document["gpus"].pop(),
    "gpu_evidence": lambda world, document: document["gpu_spdm"].pop(),
}


@pytest.mark.parametrize("code", SINGLE_ALTERATIONS)
def test_evidence_altered_in_one_place_fails_with_that_one_code(world, genuine, code):
    SINGLE_ALTERATIONS[code](world, genuine)
    verdict = world.verify(genuine)
    assert not verdict.affirming
    assert codes(verdict) == {code}, verdict.failures


def test_every_documented_code_of_the_evidence_has_its_own_test():
    # `stale` depends on the clock, not the evidence; `verifier_error` on a bug; the release codes
    # on the reference values: all tested below.
    assert set(SINGLE_ALTERATIONS) == set(verifier.FAILURE_CODES) - {
        "stale",
        "verifier_error",
        "release_retired",
        "release_not_pinned",
        "secure_boot_off",  # on a policy that requires Secure Boot: tests/attestation/test_secure_boot_policy.py
        "gpu_rim",  # on the RIMs and revocation: tests/attestation/test_gpu_spdm_appraisal.py
        "gpu_revocation",
    }


def test_a_node_booting_a_retired_kernel_fails_naming_the_release(world, genuine):
    kernel = releases.BOOT_RELEASES["kernel"][-1]  # the factory kernel every node boots
    retired = reference_values(parse_manifest(releases.reference_values()), retired={kernel})
    verdict = world.verify(genuine, reference=retired)
    assert [(f.code, f.component, f.expected, f.found) for f in verdict.failures] == [
        ("release_retired", "kernel", "a release not retired", f"{kernel} (retired)")
    ]
    assert ear.trustworthiness_vector(verdict)["executables"] == ear.CONTRAINDICATED


def test_a_node_booting_a_release_its_class_is_not_pinned_to_fails_for_each_gpu(world, genuine):
    older_driver = releases.GPU_RELEASES["driver"][0]
    pinned = reference_values(parse_manifest(releases.reference_values()), pinned={older_driver})
    verdict = world.verify(genuine, reference=pinned)
    assert codes(verdict) == {"release_not_pinned"}
    assert [f.component for f in verdict.failures] == [f"gpu{i}.driver" for i in range(8)]
    assert verdict.failures[0].found == releases.GPU_RELEASES["driver"][-1]


def test_pinned_to_the_releases_it_boots_a_node_affirms(world, genuine):
    factory = {releases.BOOT_RELEASES[c][-1] for c in releases.BOOT_COMPONENTS}
    pinned = reference_values(parse_manifest(releases.reference_values()), pinned=factory)
    assert world.verify(genuine, reference=pinned).affirming


def test_evidence_verified_after_the_policys_age_is_stale(world, genuine):
    late = NOW + datetime.timedelta(seconds=world.policy.max_evidence_age_seconds)
    verdict = world.verify(genuine, now=late)
    assert codes(verdict) == {"stale"}
    assert world.verify(genuine, now=late - datetime.timedelta(seconds=3)).affirming


def test_a_nonce_without_an_issue_time_is_stale(world):
    world_nonce, world.nonce = world.nonce, bytes(range(32))  # as long as an SPDM nonce, its time out of range
    try:
        verdict = world.verify(world.collect())
    finally:
        world.nonce = world_nonce
    assert codes(verdict) == {"stale"}


def test_a_verifier_bug_fails_closed(world, genuine, monkeypatch):
    def broken(report):
        raise RuntimeError("bug")

    monkeypatch.setattr(gpu_reports, "canonical_gpu_report", broken)
    verdict = world.verify(genuine)
    assert not verdict.affirming and codes(verdict) == {"verifier_error"}


def test_certificates_are_checked_at_now_even_once_their_chains_are_cached(world, genuine):
    assert world.verify(genuine).affirming  # the chains are cached from here on
    after_expiry = datetime.datetime(2046, 1, 1, tzinfo=datetime.UTC)  # bmcsim's certificates end in 2045
    world_nonce, world.nonce = world.nonce, new_nonce(after_expiry)
    try:
        verdict = world.verify(world.collect(), now=after_expiry)
    finally:
        world.nonce = world_nonce
    # The RIMs' signing chains end in 2045 too.
    assert codes(verdict) == {"ak_chain", "gpu_chain", "gpu_rim"}
    assert (
        len([f for f in verdict.failures if f.code == "gpu_chain"]) == 8 + 8 * 2
    )  # the reports, SPDM in and out of band


def test_the_quote_checker_takes_der_raw_and_tpmt_ecdsa_signatures(world, genuine):
    attest = base64.b64decode(genuine["quote"]["attest"])
    der = base64.b64decode(genuine["quote"]["signature"])
    r, s = decode_dss_signature(der)
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    tpmt = bytes.fromhex("0018000b") + tpm.tpm2b(r.to_bytes(32, "big")) + tpm.tpm2b(s.to_bytes(32, "big"))
    ak = x509.load_pem_x509_certificate(genuine["quote"]["ak_cert"].encode()).public_key()
    for signature in (der, raw, tpmt):
        quote, failures = verifier.verify_quote(attest, signature, ak, world.nonce)
        assert failures == [] and quote is not None and quote.extra_data == world.nonce
    _, failures = verifier.verify_quote(attest, tpmt[:-1], ak, world.nonce)
    assert [f.code for f in failures] == ["quote_signature"]


def test_three_alterations_are_all_reported(world):
    node = NodeState(world.spec)
    node.faults.append({"kind": "implant"})
    node.reset("ForceRestart", NOW.timestamp(), 0.0)
    document = world.collect(node)
    world.requote(document, nonce=new_nonce(NOW))
    document["gpus"].pop(4)
    verdict = world.verify(document)
    assert codes(verdict) == {"unknown_component_digest", "nonce_mismatch", "gpu_inventory"}
    assert {f.component for f in verdict.failures} == {"kernel", "quote.attest", "gpu4"}


def test_evidence_of_another_node_is_refused_on_identity(world, genuine):
    other = default_layout(2)[1]
    identity = NodeIdentity(other.name, other.serial, tuple(GPUIdentity(g.index, g.uuid, g.serial) for g in other.gpus))
    verdict = world.verify(genuine, node=identity)
    assert codes(verdict) == {"ak_identity", "gpu_inventory", "gpu_identity", "gpu_evidence"}


def test_a_certificate_whose_signature_is_re_encoded_with_unused_bits_is_malformed(world, genuine):
    # Found by the mutation test: the path validator accepted the device CA with its signature's
    # BIT STRING declaring one unused bit, the same signature in an encoding no CA emits.
    device_ca = x509.load_pem_x509_certificate(genuine["gpus"][2]["cert_chain"][1].encode())
    der = bytearray(device_ca.public_bytes(Encoding.DER))
    der[-len(device_ca.signature) - 1] = 1
    der[-1] &= 0xFE  # the unused bit must be zero for the encoding to parse at all
    pem = "-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(bytes(der)).decode() + "-----END CERTIFICATE-----\n"
    genuine["gpus"][2]["cert_chain"][1] = pem
    verdict = world.verify(genuine)
    assert codes(verdict) == {"malformed"} and {f.component for f in verdict.failures} == {"gpus[2].cert_chain[1]"}


def test_huge_evidence_is_malformed_not_slow(world, genuine):
    genuine["quote"]["attest"] = "A" * 10_000_000
    genuine["event_log"] = genuine["event_log"] * 1000
    genuine["gpus"][0]["cert_chain"] = genuine["gpus"][0]["cert_chain"] * 10
    verdict = world.verify(genuine)
    assert codes(verdict) == {"malformed"}
    assert {f.component for f in verdict.failures} == {"quote.attest", "event_log", "gpus[0].cert_chain"}


@pytest.mark.parametrize("document", [None, [], "evidence", 42, {}, {"quote": {}, "event_log": {}, "gpus": None}])
def test_evidence_that_is_not_evidence_is_malformed(world, document):
    verdict = world.verify(document)
    # An object without the GPUs' SPDM evidence lacks it too.
    assert not verdict.affirming and codes(verdict) - {"gpu_evidence"} == {"malformed"}


# Random damage: any change to what the evidence asserts must never verify, and never raise.

# Display-only text: the verifier does not read it, so changing it changes nothing.
UNREAD_FIELDS = {"description", "source"}


def paths(value, prefix=()):
    """Every place in the document that a mutation can change."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in UNREAD_FIELDS:
                yield (*prefix, key)
                yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield (*prefix, position)
            yield from paths(item, (*prefix, position))


def mutate_bytes(data: bytes, draw) -> bytes:
    choice = draw(st.sampled_from(["flip", "truncate", "append"]))
    if choice == "flip" and data:
        position = draw(st.integers(0, len(data) - 1))
        return data[:position] + bytes([data[position] ^ draw(st.integers(1, 255))]) + data[position + 1 :]
    if choice == "truncate" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    return data + draw(st.binary(min_size=1, max_size=8))


def mutate_value(value, draw):
    replacements = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True),
        st.text(max_size=20),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    )
    if isinstance(value, str) and value.startswith(PEM_HEADER):
        ders = list(pem_ders(value))  # one certificate, or a chain's in one text (gpu_spdm's)
        position = draw(st.integers(0, len(ders) - 1))
        ders[position] = mutate_bytes(ders[position], draw)
        return "".join(f"{PEM_HEADER}\n{base64.encodebytes(der).decode()}{PEM_FOOTER}\n" for der in ders)
    if isinstance(value, str) and draw(st.booleans()):
        try:
            return b64(mutate_bytes(base64.b64decode(value, validate=True), draw))
        except ValueError:
            return value[: draw(st.integers(0, max(0, len(value) - 1)))] if value else "x"
    if isinstance(value, list) and value and draw(st.booleans()):
        return value[: draw(st.integers(0, len(value) - 1))]
    if isinstance(value, int) and not isinstance(value, bool) and draw(st.booleans()):
        return value + draw(st.sampled_from([-1, 1, 8, 256]))
    return draw(replacements)


PEM_HEADER = "-----BEGIN CERTIFICATE-----"
PEM_FOOTER = "-----END CERTIFICATE-----"


def pem_ders(pem: str) -> tuple[bytes, ...]:
    blocks = [block for block in pem.split(PEM_FOOTER) if block.strip()]
    return tuple(base64.b64decode("".join(block.strip().splitlines()[1:])) for block in blocks)


def meaning(value):
    """The document with each certificate as its DER: two mutations of one PEM can undo each other."""
    if isinstance(value, dict):
        return {key: meaning(item) for key, item in value.items()}
    if isinstance(value, list):
        return [meaning(item) for item in value]
    if isinstance(value, str) and value.startswith(PEM_HEADER):
        return pem_ders(value)
    return value


@st.composite
def mutated(draw, document):
    document = copy.deepcopy(document)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(paths(document))))
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        if draw(st.integers(0, 4)) == 0:
            del parent[path[-1]]  # a missing field or a missing list item
        else:
            parent[path[-1]] = mutate_value(parent[path[-1]], draw)
    return document


@pytest.fixture(scope="module")
def pristine(world) -> dict:
    return world.collect()


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_random_mutations_never_affirm_and_never_raise(world, pristine, data):
    document = data.draw(mutated(pristine))
    if meaning(document) == meaning(pristine):
        return  # the mutations happened to write back what was there
    verdict = world.verify(document)
    assert not verdict.affirming, document
    assert "verifier_error" not in codes(verdict), verdict.failures


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(200), deadline=None)
@given(
    document=st.fixed_dictionaries(
        {
            "quote": json_values | st.fixed_dictionaries({"attest": json_values, "signature": json_values}),
            "event_log": json_values,
            "gpus": json_values,
        }
    )
)
def test_arbitrary_json_never_affirms_and_never_raises(world, document):
    verdict = world.verify(document)
    assert not verdict.affirming
    assert "verifier_error" not in codes(verdict)
