"""attestation/verifier/revocation.py: a chain's certificates judged by OCSP answers made here
(tests/attestation/ocsp_fixtures.py) for each way an answer can fail."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.x509 import ReasonFlags, ocsp

from attestation.verifier.revocation import ocsp_request, responder_url, revocation_failures
from tests.attestation.ocsp_fixtures import DAY, NOW, answer, issue

CA = issue("Test Device CA", ca=True)
LEAF = issue("Test GPU", CA, responder="http://ocsp.example.com/")
CHAIN = (LEAF.certificate, CA.certificate)
SUBJECT = "CN=Test GPU"


def failures(*answers: bytes, max_age: timedelta | None = None) -> list[str]:
    return revocation_failures(CHAIN, answers, at=NOW, max_age=max_age)


def test_a_good_fresh_answer_signed_by_the_issuer_passes():
    assert failures(answer(LEAF.certificate, CA)) == []


def test_a_good_answer_from_a_responder_the_issuer_authorized_passes():
    responder = issue("Test OCSP responder", CA, ocsp_signing=True)
    assert failures(answer(LEAF.certificate, CA, signer=responder, include_signer=True)) == []


def test_without_an_answer_the_certificate_fails_by_name():
    assert failures() == [f"revocation: no OCSP answer for {SUBJECT}"]


def test_an_answer_for_another_serial_is_no_answer():
    other = issue("Another GPU", CA)
    assert failures(answer(other.certificate, CA)) == [f"revocation: no OCSP answer for {SUBJECT}"]


def test_a_revoked_certificate_fails_with_its_reason_and_time():
    revoked = answer(
        LEAF.certificate,
        CA,
        status=ocsp.OCSPCertStatus.REVOKED,
        revoked_at=NOW - 2 * DAY,
        reason=ReasonFlags.key_compromise,
    )
    assert failures(revoked) == [f"revocation: {SUBJECT}: revoked at 2026-05-30T00:00:00+00:00 (keyCompromise)"]


def test_an_unknown_certificate_fails():
    unknown = answer(LEAF.certificate, CA, status=ocsp.OCSPCertStatus.UNKNOWN)
    assert failures(unknown) == [f"revocation: {SUBJECT}: the responder does not know the certificate (status unknown)"]


def test_an_expired_answer_fails_unless_the_policy_allows_its_age():
    expired = answer(LEAF.certificate, CA, this_update=NOW - 3 * DAY, next_update=NOW - DAY)
    [failure] = failures(expired)
    assert failure.startswith(f"revocation: {SUBJECT}: an expired OCSP answer (thisUpdate 2026-05-29")
    assert failures(expired, max_age=3 * DAY) == []
    assert "older than the policy's 172800 s" in failures(expired, max_age=2 * DAY)[0]


def test_a_good_answer_from_after_the_time_asked_about_vouches_for_it_a_revocation_never_does():
    # Fetched while the evidence is appraised: a certificate revoked before then would be revoked still.
    assert failures(answer(LEAF.certificate, CA, this_update=NOW + DAY, next_update=NOW + 2 * DAY)) == []
    revoked = answer(
        LEAF.certificate,
        CA,
        status=ocsp.OCSPCertStatus.REVOKED,
        this_update=NOW + DAY,
        next_update=None,
        revoked_at=NOW + DAY,
    )
    assert "revoked at" in failures(revoked)[0]


def test_an_answer_signed_by_the_wrong_key_fails_its_signature():
    # An impostor CA of the same name, named as the responder by that name.
    forged = answer(LEAF.certificate, CA, signer=issue("Test Device CA", ca=True), by_name=True)
    assert failures(forged) == [f"revocation: {SUBJECT}: an OCSP answer whose signature does not verify"]


@pytest.mark.parametrize("ocsp_signing", [False, True])
def test_a_responder_the_issuer_did_not_authorize_fails(ocsp_signing):
    # Without the OCSP signing EKU, or issued by another CA.
    issuer = CA if not ocsp_signing else issue("Another CA", ca=True)
    responder = issue("Test OCSP responder", issuer, ocsp_signing=ocsp_signing)
    [failure] = failures(answer(LEAF.certificate, CA, signer=responder, include_signer=True))
    assert failure.endswith("an OCSP answer signed by neither the issuer nor a responder it authorized")


def test_a_good_answer_among_bad_ones_will_do_and_else_the_newest_one_is_reported():
    old_good = answer(LEAF.certificate, CA, this_update=NOW - 3 * DAY, next_update=NOW - 2 * DAY)
    newer_revoked = answer(LEAF.certificate, CA, status=ocsp.OCSPCertStatus.REVOKED, revoked_at=NOW - DAY)
    assert failures(newer_revoked, answer(LEAF.certificate, CA)) == []
    assert failures(old_good, newer_revoked)[0].endswith("(no reason given)")


def test_bytes_that_are_no_answer_are_ignored():
    assert failures(b"not DER") == [f"revocation: no OCSP answer for {SUBJECT}"]


def test_every_certificate_but_the_root_needs_its_own_answer():
    intermediate = issue("Test Intermediate CA", CA, ca=True)
    leaf = issue("Test GPU 2", intermediate)
    chain = (leaf.certificate, intermediate.certificate, CA.certificate)
    assert revocation_failures(chain, [answer(leaf.certificate, intermediate)], at=NOW) == [
        "revocation: no OCSP answer for CN=Test Intermediate CA"
    ]


def test_the_request_names_the_certificate_and_its_responder_is_the_aia_one():
    request = ocsp.load_der_ocsp_request(ocsp_request(LEAF.certificate, CA.certificate))
    assert request.serial_number == LEAF.certificate.serial_number
    assert responder_url(LEAF.certificate) == "http://ocsp.example.com/"
    assert responder_url(CA.certificate) is None


def test_a_revocation_stays_one_however_old_the_answer():
    revoked, old = ocsp.OCSPCertStatus.REVOKED, NOW - 4 * DAY
    expired = answer(
        LEAF.certificate, CA, status=revoked, revoked_at=old, this_update=NOW - 3 * DAY, next_update=NOW - DAY
    )
    assert failures(expired) == [f"revocation: {SUBJECT}: revoked at 2026-05-28T00:00:00+00:00 (no reason given)"]
