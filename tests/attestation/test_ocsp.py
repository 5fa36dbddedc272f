"""attestation/ocsp.py and the commands that use it: OCSP answers imported (manage.py
import_ocsp_responses) or fetched from a local responder, kept newest first, and checked by
manage.py verify_gpu_evidence for NVIDIA's captured device chain (tests/data/nvidia/)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509 import ocsp as x509_ocsp
from django.core.management import call_command
from django.core.management.base import CommandError

from attestation import ocsp
from attestation.models import OcspResponse, TrustAnchor
from tests.attestation.ocsp_fixtures import DAY, NOW, Issued, answer, issue

DATA = Path(__file__).resolve().parent.parent / "data"
EVIDENCE = DATA / "nvidia"
HOPPER_NONCE = "27a328247bf7935c993341cf587be6f05986ccce4fe7ba2c54100bd616a58f66"
HOPPER_CHAIN = tuple(x509.load_pem_x509_certificates((EVIDENCE / "hopperCertChain.txt").read_bytes()))
CA = issue("Test Device CA", ca=True)
LEAF = issue("Test GPU", CA, responder="http://127.0.0.1:9/")
CHAIN = (LEAF.certificate, CA.certificate)


class Responder(ThreadingHTTPServer):
    """An OCSP responder on 127.0.0.1 answering each POST with `answer`; what it was asked is in `requests`."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ResponderHandler)
        self.answer = b""
        self.requests: list[bytes] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}/"


class ResponderHandler(BaseHTTPRequestHandler):
    server: Responder

    def do_POST(self):
        self.server.requests.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/ocsp-response")
        self.send_header("Content-Length", str(len(self.server.answer)))
        self.end_headers()
        self.wfile.write(self.server.answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def responder():
    server = Responder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_imported_answers_keep_the_newest_and_pass_the_chain(db, tmp_path):
    (tmp_path / "old.der").write_bytes(answer(LEAF.certificate, CA, this_update=NOW - 2 * DAY))
    (tmp_path / "new.der").write_bytes(answer(LEAF.certificate, CA))
    out = StringIO()
    call_command("import_ocsp_responses", str(tmp_path), stdout=out)
    assert out.getvalue() == "new.der: stored\nold.der: kept the newer answer already stored\n"
    kept = OcspResponse.objects.get()
    assert (kept.this_update, kept.next_update, kept.source) == (NOW - DAY, NOW + DAY, "imported")
    assert kept.serial_number == f"{LEAF.certificate.serial_number:x}"
    assert ocsp.chain_revocation_failures(CHAIN, at=NOW) == []
    assert ocsp.chain_revocation_failures(CHAIN, at=NOW + 2 * DAY)[0].startswith("revocation: CN=Test GPU: an expired")
    assert ocsp.chain_revocation_failures(CHAIN, at=NOW + 2 * DAY, max_age=3 * DAY) == []


def test_a_file_that_is_no_answer_is_refused_and_nothing_is_imported(db, tmp_path):
    (tmp_path / "a.der").write_bytes(answer(LEAF.certificate, CA))
    (tmp_path / "b.der").write_bytes(b"not DER")
    with pytest.raises(CommandError, match=r"b\.der: not an OCSP answer"):
        call_command("import_ocsp_responses", str(tmp_path))
    assert not OcspResponse.objects.exists()


def test_an_answer_fetched_from_the_responder_is_kept(db, responder):
    responder.answer = answer(LEAF.certificate, CA)
    assert ocsp.fetch_ocsp_responses(CHAIN, responder=responder.url) == []
    [request] = responder.requests
    assert x509_ocsp.load_der_ocsp_request(request).serial_number == LEAF.certificate.serial_number
    assert OcspResponse.objects.get().source == "fetched"
    assert ocsp.chain_revocation_failures(CHAIN, at=NOW) == []


def test_a_fetched_answer_the_issuer_did_not_sign_is_not_kept(db, responder):
    impostor = issue("Test Device CA", ca=True)
    responder.answer = answer(LEAF.certificate, CA, signer=impostor, by_name=True)
    [problem] = ocsp.fetch_ocsp_responses(CHAIN, responder=responder.url)
    assert problem == f"CN=Test GPU: {responder.url}: an OCSP answer whose signature does not verify"
    assert not OcspResponse.objects.exists()


def test_the_responder_a_certificate_names_must_be_a_public_address(db):
    [problem] = ocsp.fetch_ocsp_responses(CHAIN)
    assert problem.startswith("CN=Test GPU: http://127.0.0.1:9/: 127.0.0.1, which is not a public address")


def test_an_appraisal_asks_about_each_certificate_once_and_a_silent_responder_no_more(db, responder):
    """A node's GPUs share their chains' upper certificates: an 8-GPU node must not wait out an
    unreachable responder's deadline once per GPU."""
    heard: list[str] = []
    check = ocsp.revocation_check(at=NOW, max_age=None, fetch=True, responder=responder.url, on_problem=heard.append)
    responder.answer = b"not DER"
    assert check(CHAIN) and check(CHAIN)
    assert len(responder.requests) == 1  # the same certificate, asked once

    closed = "http://127.0.0.1:9/"  # nothing listens there
    silent = ocsp.revocation_check(at=NOW, max_age=None, fetch=True, responder=closed, on_problem=heard.append)
    for name in ("Test GPU 2", "Test GPU 3"):
        assert silent((issue(name, CA).certificate, CA.certificate))
    assert heard[-2].startswith(f"OCSP: CN=Test GPU 2: {closed}: ")
    assert heard[-1] == f"OCSP: CN=Test GPU 3: {closed}: not asked again (it could not be reached)"


@pytest.fixture
def anchors(db):
    TrustAnchor.objects.create(role="nvidia_device_root", pem=(EVIDENCE / "nvidia_device_identity_ca.pem").read_text())
    TrustAnchor.objects.create(role="nvidia_rim_root", pem=(DATA / "nvidia_rims" / "verifier_RIM_root.pem").read_text())


def verify(tmp_path: Path, *options: str) -> tuple[list[str], str]:
    (tmp_path / "rims").mkdir(exist_ok=True)
    out, err = StringIO(), StringIO()
    arguments = [
        *("--report", str(EVIDENCE / "hopperAttestationReport.txt"), "--chain", str(EVIDENCE / "hopperCertChain.txt")),
        *("--nonce", HOPPER_NONCE, "--rims", str(tmp_path / "rims"), "--at", "2024-06-01T00:00:00+00:00"),
    ]
    with pytest.raises(SystemExit):
        call_command("verify_gpu_evidence", *arguments, *options, stdout=out, stderr=err)
    return json.loads(out.getvalue())["failures"], err.getvalue()


def subject(certificate: x509.Certificate) -> str:
    return certificate.subject.rfc4514_string()


def test_the_command_checks_the_device_chain_with_the_imported_answers(anchors, tmp_path):
    # An answer for the GPU's device certificate (the one its firmware's leaf is issued by), with
    # the right hashes, that NVIDIA did not sign.
    impostor = issue("NVIDIA impostor", ca=True)
    device, issuer = HOPPER_CHAIN[1], HOPPER_CHAIN[2]
    forged = answer(device, Issued(issuer, impostor.key), signer=impostor)
    (tmp_path / "forged.der").write_bytes(forged)
    call_command("import_ocsp_responses", str(tmp_path / "forged.der"), stdout=StringIO())
    failures, _ = verify(tmp_path)
    revocation = [failure.split(", found ", 1)[1] for failure in failures if failure.startswith("gpu_revocation")]
    assert revocation == [
        f"revocation: {subject(device)}: an OCSP answer signed by neither the issuer nor a responder it authorized",
        *(f"revocation: no OCSP answer for {subject(certificate)}" for certificate in HOPPER_CHAIN[2:-1]),
    ]


def test_the_command_fetches_first_and_says_why_an_answer_was_not_had(anchors, tmp_path, responder):
    responder.answer = b"not DER"
    failures, err = verify(tmp_path, "--fetch-ocsp", "--ocsp-responder", responder.url, "--ocsp-max-age", "3600")
    assert len(responder.requests) == len(HOPPER_CHAIN) - 2  # neither the firmware's leaf nor the root
    assert f"OCSP: {subject(HOPPER_CHAIN[1])}: {responder.url}: not an OCSP answer" in err
    assert any(failure.endswith(f"revocation: no OCSP answer for {subject(HOPPER_CHAIN[1])}") for failure in failures)


def test_a_negative_max_age_is_refused(anchors, tmp_path):
    with pytest.raises(CommandError, match="--ocsp-max-age"):
        verify(tmp_path, "--ocsp-max-age", "-1")
