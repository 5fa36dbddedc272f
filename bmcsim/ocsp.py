"""The OCSP responder (RFC 6960) of the CAs that issue the GPU chains' certificates, as NVIDIA's
responder answers for its own: POST /bmcsim/v1/ocsp (application/ocsp-request) or
GET /bmcsim/v1/ocsp/{base64 request}.

A request names its certificate by its issuer's name and key hashes and its serial. Where the issuer
is the device identity CA (which issues the provisioner CA), the provisioner CA (the GPUs' leaves)
or the RIM root (the RIM signer), the answer says `good`, thisUpdate now, nextUpdate a day later,
signed by that issuer itself (ResponderID by key hash) with ECDSA over SHA-384, and echoes the
request's nonce extension. The responder keeps no list of serials, so it vouches for any serial
under those issuers; a request for any other issuer is answered `unauthorized`, one that does not
parse `malformedRequest` (both unsigned, as RFC 6960 has them).
"""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import ocsp

from .pki import PKI

VALIDITY = datetime.timedelta(days=1)
CONTENT_TYPE = "application/ocsp-response"
REQUEST_CONTENT_TYPE = "application/ocsp-request"


def answer(pki: PKI, request_der: bytes, now: float) -> bytes:
    """The DER answer to the DER request."""
    try:
        request = ocsp.load_der_ocsp_request(request_der)
        algorithm = request.hash_algorithm
    except (ValueError, UnsupportedAlgorithm):  # ValueError too for several certificates in one request
        return _unsuccessful(ocsp.OCSPResponseStatus.MALFORMED_REQUEST)
    issued_by = _issuer(pki, request, algorithm)
    if issued_by is None:
        return _unsuccessful(ocsp.OCSPResponseStatus.UNAUTHORIZED)
    issuer, key = issued_by
    this_update = datetime.datetime.fromtimestamp(now, datetime.UTC).replace(microsecond=0)
    builder = (
        ocsp.OCSPResponseBuilder()
        .add_response_by_hash(
            issuer_name_hash=request.issuer_name_hash,
            issuer_key_hash=request.issuer_key_hash,
            serial_number=request.serial_number,
            algorithm=algorithm,
            cert_status=ocsp.OCSPCertStatus.GOOD,
            this_update=this_update,
            next_update=this_update + VALIDITY,
            revocation_time=None,
            revocation_reason=None,
        )
        .responder_id(ocsp.OCSPResponderEncoding.HASH, issuer)
    )
    try:
        nonce = request.extensions.get_extension_for_class(x509.OCSPNonce).value
    except x509.ExtensionNotFound:
        pass
    else:
        builder = builder.add_extension(nonce, critical=False)
    return builder.sign(key, hashes.SHA384()).public_bytes(serialization.Encoding.DER)


def _issuer(
    pki: PKI, request: ocsp.OCSPRequest, algorithm: hashes.HashAlgorithm
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    for issuer, key in pki.ocsp_issuers():
        name_hash = _digest(algorithm, issuer.subject.public_bytes())
        # A CertID's key hash is over the subjectPublicKey BIT STRING's contents: for an EC key, its point.
        point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        if (name_hash, _digest(algorithm, point)) == (request.issuer_name_hash, request.issuer_key_hash):
            return issuer, key
    return None


def _digest(algorithm: hashes.HashAlgorithm, data: bytes) -> bytes:
    digest = hashes.Hash(algorithm)
    digest.update(data)
    return digest.finalize()


def _unsuccessful(status: ocsp.OCSPResponseStatus) -> bytes:
    return ocsp.OCSPResponseBuilder.build_unsuccessful(status).public_bytes(serialization.Encoding.DER)
