"""Revocation of a certificate chain's certificates, decided from OCSP answers (RFC 6960) that
were fetched from the issuers' responders or imported by an operator (an air-gapped control
plane): pure, no I/O, no clock.

Each certificate but the root needs an answer that its issuer signed, or an authorized responder
did (a certificate inside the answer, issued by the issuer for OCSP signing), for its serial and
its issuer's name and key hashes; that says `good`; and that is fresh at the time asked about:
thisUpdate <= at < nextUpdate, or, where the policy allows answers `max_age` old, at most that
much older than thisUpdate. Anything else is a failure saying why; a certificate no answer is
for fails too, "no OCSP answer for <subject>": missing revocation data is not a pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.x509 import ocsp
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID

from attestation.verifier.verdict import shown

# What a request names a certificate by: NVIDIA's own verifiers ask with SHA-384 CertIDs.
REQUEST_HASH = hashes.SHA384


def read_answer(der: bytes) -> ocsp.OCSPResponse:
    """A successful OCSP answer; ValueError saying why the bytes are not one."""
    try:
        response = ocsp.load_der_ocsp_response(der)
    except ValueError as error:
        raise ValueError(f"not an OCSP answer: {error}") from None
    if response.response_status != ocsp.OCSPResponseStatus.SUCCESSFUL:
        raise ValueError(f"an OCSP answer with status {response.response_status.name}, no certificate status")
    return response


def ocsp_request(certificate: x509.Certificate, issuer: x509.Certificate) -> bytes:
    """The DER request to POST to the responder for `certificate`'s status."""
    builder = ocsp.OCSPRequestBuilder().add_certificate(certificate, issuer, REQUEST_HASH())
    return builder.build().public_bytes(serialization.Encoding.DER)


def responder_url(certificate: x509.Certificate) -> str | None:
    """The OCSP responder its Authority Information Access extension names, if any."""
    try:
        access = certificate.extensions.get_extension_for_class(x509.AuthorityInformationAccess).value
    except x509.ExtensionNotFound:
        return None
    for description in access:
        location = description.access_location
        if description.access_method == AuthorityInformationAccessOID.OCSP and isinstance(
            location, x509.UniformResourceIdentifier
        ):
            return location.value
    return None


def revocation_failures(
    chain: Sequence[x509.Certificate],
    answers: Iterable[bytes],
    *,
    at: datetime,
    max_age: timedelta | None = None,
) -> list[str]:
    """Why the chain (leaf first, root last) is not known unrevoked at `at`; empty when it is.
    Answers that do not parse, or are for other certificates, are ignored."""
    if at.tzinfo is None:
        raise ValueError("at must be timezone-aware")
    parsed = []
    for der in answers:
        try:
            parsed.append(read_answer(der))
        except ValueError:
            continue  # answers nothing
    failures = []
    for certificate, issuer in itertools.pairwise(chain):
        problem = certificate_problem(certificate, issuer, parsed, at=at, max_age=max_age)
        if problem is not None:
            failures.append(f"revocation: {problem}")
    return failures


def certificate_problem(
    certificate: x509.Certificate,
    issuer: x509.Certificate,
    answers: Sequence[ocsp.OCSPResponse],
    *,
    at: datetime,
    max_age: timedelta | None = None,
) -> str | None:
    """Why `certificate` is not known unrevoked at `at` by any of `answers`, or None. Where several
    answers are for it and none will do, the newest one's problem."""
    subject = shown(certificate.subject.rfc4514_string())
    judged = []
    for response in answers:
        single = single_response(response, certificate, issuer)
        if single is not None:
            problem = signature_problem(response, issuer, response.produced_at_utc) or status_problem(
                single, at=at, max_age=max_age
            )
            if problem is None:
                return None
            judged.append((single.this_update_utc, problem))
    if not judged:
        return f"no OCSP answer for {subject}"
    _, newest = max(judged, key=lambda found: found[0])
    return f"{subject}: {newest}"


def single_response(
    response: ocsp.OCSPResponse, certificate: x509.Certificate, issuer: x509.Certificate
) -> ocsp.OCSPSingleResponse | None:
    """The answer's response for `certificate` (its serial, its issuer's name and key hashes)."""
    for single in response.responses:
        if single.serial_number != certificate.serial_number:
            continue
        algorithm = single.hash_algorithm
        if single.issuer_name_hash == _digest(algorithm, issuer.subject.public_bytes()) and (
            single.issuer_key_hash == _digest(algorithm, _key_bits(issuer))
        ):
            return single
    return None


def signature_problem(response: ocsp.OCSPResponse, issuer: x509.Certificate, produced_at: datetime) -> str | None:
    """Why the answer is not signed by `issuer` or a responder it authorized (valid when the answer
    was produced), or None."""
    signer = issuer if _names(response, issuer) else _authorized_responder(response, issuer, produced_at)
    if signer is None:
        return "an OCSP answer signed by neither the issuer nor a responder it authorized"
    if not _verifies(signer.public_key(), response.signature, response.tbs_response_bytes, response):
        return "an OCSP answer whose signature does not verify"
    return None


def status_problem(single: ocsp.OCSPSingleResponse, *, at: datetime, max_age: timedelta | None) -> str | None:
    """Why a response does not say `good` at `at`, or None."""
    this_update, next_update = single.this_update_utc, single.next_update_utc
    # Revoked is for good, however old the answer that says so; so a good answer from after `at`
    # (fetched while the evidence is appraised) vouches for `at` too.
    if single.certificate_status == ocsp.OCSPCertStatus.REVOKED:
        reason = single.revocation_reason.value if single.revocation_reason is not None else "no reason given"
        revoked_at = single.revocation_time_utc
        return f"revoked at {revoked_at.isoformat() if revoked_at else 'an unknown time'} ({reason})"
    in_window = next_update is not None and at < next_update
    if not in_window and (max_age is None or at - this_update > max_age):
        allowed = "" if max_age is None else f", older than the policy's {int(max_age.total_seconds())} s"
        until = next_update.isoformat() if next_update is not None else "no nextUpdate"
        return f"an expired OCSP answer (thisUpdate {this_update.isoformat()}, nextUpdate {until}{allowed})"
    if single.certificate_status == ocsp.OCSPCertStatus.UNKNOWN:
        return "the responder does not know the certificate (status unknown)"
    return None


def _names(response: ocsp.OCSPResponse, certificate: x509.Certificate) -> bool:
    """Whether the answer's ResponderID is `certificate`."""
    if response.responder_name is not None:
        return response.responder_name == certificate.subject
    return response.responder_key_hash == _digest(hashes.SHA1(), _key_bits(certificate))


def _authorized_responder(
    response: ocsp.OCSPResponse, issuer: x509.Certificate, produced_at: datetime
) -> x509.Certificate | None:
    for candidate in response.certificates:
        if not _names(response, candidate):
            continue
        try:
            candidate.verify_directly_issued_by(issuer)
            usage = candidate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm, x509.ExtensionNotFound):
            continue
        valid = candidate.not_valid_before_utc <= produced_at <= candidate.not_valid_after_utc
        if ExtendedKeyUsageOID.OCSP_SIGNING in usage and valid:
            return candidate
    return None


def _verifies(key: object, signature: bytes, data: bytes, response: ocsp.OCSPResponse) -> bool:
    algorithm = response.signature_hash_algorithm
    try:
        if isinstance(key, ec.EllipticCurvePublicKey) and algorithm is not None:
            key.verify(signature, data, ec.ECDSA(algorithm))
        elif isinstance(key, rsa.RSAPublicKey) and algorithm is not None:
            key.verify(signature, data, padding.PKCS1v15(), algorithm)
        elif isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
            key.verify(signature, data)
        else:
            return False
    except (InvalidSignature, UnsupportedAlgorithm, ValueError):
        return False
    return True


def _key_bits(certificate: x509.Certificate) -> bytes:
    """The subjectPublicKey BIT STRING's contents (past its unused-bits octet), which CertIDs and
    ResponderIDs hash: SubjectPublicKeyInfo ::= SEQUENCE { algorithm SEQUENCE, subjectPublicKey BIT STRING }."""
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _, inside = _der_header(spki, 0)
    length, after_algorithm = _der_header(spki, inside)
    _, bits = _der_header(spki, after_algorithm + length)
    return spki[bits + 1 :]


def _der_header(der: bytes, at: int) -> tuple[int, int]:
    """The length of the DER element at `at` and where its contents begin."""
    first = der[at + 1]
    if first < 0x80:
        return first, at + 2
    size = first & 0x7F
    return int.from_bytes(der[at + 2 : at + 2 + size], "big"), at + 2 + size


def _digest(algorithm: hashes.HashAlgorithm, data: bytes) -> bytes:
    digest = hashes.Hash(algorithm)
    digest.update(data)
    return digest.finalize()
