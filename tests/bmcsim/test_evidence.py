"""Attestation evidence checked as a verifier would: TPM 2.0 bytes, signatures, chains, replay."""

from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NODE = "node-003"


class Reader:
    """Big-endian reader of TPM 2.0 marshalled structures."""

    def __init__(self, data: bytes):
        self.data, self.offset = data, 0

    def take(self, n: int) -> bytes:
        chunk = self.data[self.offset : self.offset + n]
        assert len(chunk) == n, "structure ends early"
        self.offset += n
        return chunk

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def tpm2b(self) -> bytes:
        return self.take(self.uint(2))


def parse_tpms_attest(data: bytes) -> dict:
    r = Reader(data)
    attest = {
        "magic": r.uint(4),
        "type": r.uint(2),
        "qualifiedSigner": r.tpm2b(),
        "extraData": r.tpm2b(),
        "clock": r.uint(8),
        "resetCount": r.uint(4),
        "restartCount": r.uint(4),
        "safe": r.uint(1),
        "firmwareVersion": r.uint(8),
    }
    selections = []
    for _ in range(r.uint(4)):
        hash_alg = r.uint(2)
        bitmap = r.take(r.uint(1))
        selections.append((hash_alg, [i for i in range(8 * len(bitmap)) if bitmap[i // 8] >> (i % 8) & 1]))
    attest["pcrSelect"] = selections
    attest["pcrDigest"] = r.tpm2b()
    assert r.offset == len(data), "trailing bytes after TPMS_ATTEST"
    return attest


def ak_public_area(key: ec.EllipticCurvePublicKey) -> bytes:
    """TPMT_PUBLIC of a restricted ECDSA P-256 signing key, written out field by field."""
    n = key.public_numbers()
    return (
        bytes.fromhex("0023000b000500720000")  # ECC, nameAlg SHA-256, attributes, empty authPolicy
        + bytes.fromhex("00100018000b00030010")  # no symmetric, ECDSA/SHA-256, NIST P-256, no KDF
        + b"\x00\x20"
        + n.x.to_bytes(32, "big")
        + b"\x00\x20"
        + n.y.to_bytes(32, "big")
    )


def replay(event_log: list[dict]) -> dict[int, bytes]:
    pcrs: dict[int, bytes] = {}
    for event in event_log:
        pcrs[event["pcr"]] = hashlib.sha256(pcrs.get(event["pcr"], bytes(32)) + bytes.fromhex(event["digest"])).digest()
    return pcrs


def evidence(bmcsim, node: str = NODE, nonce: bytes | None = None) -> tuple[bytes, dict]:
    nonce = nonce or os.urandom(32)
    r = bmcsim.post(f"/agent/{node}/evidence", json={"nonce": nonce.hex()})
    assert r.status_code == 200, r.text
    return nonce, r.json()


def golden(bmcsim) -> dict:
    return bmcsim.get("/bmcsim/v1/reference-values").json()


def test_quote_is_a_tpm2_quote_signed_by_a_certified_attestation_key(bmcsim):
    nonce, body = evidence(bmcsim)
    attest_bytes = base64.b64decode(body["quote"]["attest"])
    attest = parse_tpms_attest(attest_bytes)
    assert attest["magic"] == 0xFF544347
    assert attest["type"] == 0x8018  # TPM_ST_ATTEST_QUOTE
    assert attest["extraData"] == nonce
    assert attest["safe"] == 1

    ak_cert = x509.load_pem_x509_certificate(body["quote"]["ak_cert"].encode())
    ak = ak_cert.public_key()
    assert isinstance(ak, ec.EllipticCurvePublicKey) and ak.curve.name == "secp256r1"
    assert attest["qualifiedSigner"] == b"\x00\x0b" + hashlib.sha256(ak_public_area(ak)).digest()
    ak.verify(base64.b64decode(body["quote"]["signature"]), attest_bytes, ec.ECDSA(hashes.SHA256()))

    manufacturer_ca = x509.load_pem_x509_certificate(bmcsim.get("/bmcsim/v1/roots").json()["manufacturer_ca"].encode())
    ak_cert.verify_directly_issued_by(manufacturer_ca)
    assert ak_cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == NODE
    assert ak_cert.subject.get_attributes_for_oid(NameOID.SERIAL_NUMBER)[0].value == bmcsim.node(NODE)["serial"]

    # The quoted PCRs are what the event log replays to, in selection order.
    ((hash_alg, selected),) = attest["pcrSelect"]
    assert hash_alg == 0x000B and selected == [0, 4, 8, 9]
    pcrs = replay(body["event_log"])
    assert attest["pcrDigest"] == hashlib.sha256(b"".join(pcrs[i] for i in selected)).digest()


def test_event_log_measures_the_golden_boot_chain(bmcsim):
    _, body = evidence(bmcsim)
    components = golden(bmcsim)["boot"]["components"]
    assert [e["component"] for e in body["event_log"]] == ["firmware", "bootloader", "kernel", "initrd", "cmdline"]
    for event in body["event_log"]:
        assert event["digest"] in {c["digest"] for c in components[event["component"]]}, event
        assert event["description"]


def test_a_tampered_signature_or_another_nonce_does_not_verify(bmcsim):
    nonce, body = evidence(bmcsim)
    attest = bytearray(base64.b64decode(body["quote"]["attest"]))
    attest[-1] ^= 1
    ak = x509.load_pem_x509_certificate(body["quote"]["ak_cert"].encode()).public_key()
    assert isinstance(ak, ec.EllipticCurvePublicKey)
    with pytest.raises(InvalidSignature):
        ak.verify(base64.b64decode(body["quote"]["signature"]), bytes(attest), ec.ECDSA(hashes.SHA256()))
    other_nonce, other = evidence(bmcsim)
    assert parse_tpms_attest(base64.b64decode(other["quote"]["attest"]))["extraData"] == other_nonce != nonce


def test_gpu_reports_are_signed_by_device_keys_chained_to_the_vendor_root(bmcsim):
    nonce, body = evidence(bmcsim)
    root = x509.load_pem_x509_certificate(bmcsim.get("/bmcsim/v1/roots").json()["gpu_vendor_root"].encode())
    reference = golden(bmcsim)["gpu"]["measurements"]
    inventory = bmcsim.node(NODE)["gpus"]
    assert [g["uuid"] for g in body["gpus"]] == [g["uuid"] for g in inventory]
    for report in body["gpus"]:
        assert report["nonce"] == nonce.hex()
        assert report["cc_mode"] == "on"
        for name, digest in report["measurements"].items():
            assert digest in {m["digest"] for m in reference[name]}
        device, *intermediates = [x509.load_pem_x509_certificate(pem.encode()) for pem in report["cert_chain"]]
        issuer = device
        for ca in intermediates:
            issuer.verify_directly_issued_by(ca)
            issuer = ca
        issuer.verify_directly_issued_by(root)
        assert device.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == report["uuid"]
        key = device.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey)
        assert key.curve.name == "secp384r1"
        signed = {k: v for k, v in report.items() if k not in ("signature", "cert_chain")}
        canonical = json.dumps(signed, sort_keys=True, separators=(",", ":")).encode()
        key.verify(base64.b64decode(report["signature"]), canonical, ec.ECDSA(hashes.SHA384()))


def kernel_digest(bmcsim) -> str:
    _, body = evidence(bmcsim)
    (kernel,) = [e["digest"] for e in body["event_log"] if e["component"] == "kernel"]
    return kernel


def test_implant_is_measured_at_boot_survives_secure_erase_and_goes_with_the_reflash(bmcsim):
    golden_kernels = {c["digest"] for c in golden(bmcsim)["boot"]["components"]["kernel"]}
    clean = kernel_digest(bmcsim)
    assert clean in golden_kernels
    assert bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "implant"}).status_code == 201
    bmcsim.reset(NODE, "ForceRestart")
    tampered = kernel_digest(bmcsim)
    assert tampered != clean and tampered not in golden_kernels

    for drive in ("0", "1"):
        r = bmcsim.post(f"/redfish/v1/Systems/{NODE}/Storage/1/Drives/{drive}/Actions/Drive.SecureErase", json={})
        assert bmcsim.get(r.headers["Location"]).json()["TaskState"] == "Completed"
    bmcsim.reset(NODE, "ForceRestart")
    assert kernel_digest(bmcsim) == tampered

    assert bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE}).json() == {"cleared": 1}
    bmcsim.reset(NODE, "ForceRestart")
    assert kernel_digest(bmcsim) == clean


def test_cc_mode_fault_changes_what_the_gpus_report(bmcsim):
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "cc_mode", "mode": "devtools"})
    assert r.status_code == 201
    _, body = evidence(bmcsim)
    assert {g["cc_mode"] for g in body["gpus"]} == {"devtools"}
    bad = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "cc_mode", "mode": "maybe"})
    assert bad.status_code == 400
    bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE})
    _, body = evidence(bmcsim)
    assert {g["cc_mode"] for g in body["gpus"]} == {"on"}


def test_evidence_needs_a_hex_nonce(bmcsim):
    for body in ({"nonce": "xyz"}, {"nonce": ""}, {}, {"nonce": "ab" * 65}, {"nonce": 12}):
        r = bmcsim.post(f"/agent/{NODE}/evidence", json=body)
        assert r.status_code == 400 and "nonce" in r.json()["detail"], body
    assert bmcsim.post(f"/agent/{NODE}/evidence", data=b"{").status_code == 400
