"""bmcsim's trust anchors, one per role the control plane installs, and the OCSP responder of the
GPU chains' CAs, whose answers the control plane's revocation check (attestation.verifier.revocation)
takes as NVIDIA's own."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime, timedelta
from io import StringIO

import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509 import ocsp
from django.core.management import call_command

from attestation.models import TrustAnchor, TrustAnchorRole
from attestation.verifier.gpu_rims import signing_chain
from attestation.verifier.revocation import ocsp_request, revocation_failures, signature_problem, single_response
from tests.bmcsim.test_gpu_spdm_in_band import in_band, read

OCSP = "/bmcsim/v1/ocsp"


def roots(bmcsim) -> dict[str, x509.Certificate]:
    pems = bmcsim.get("/bmcsim/v1/roots").json()
    return {role: x509.load_pem_x509_certificate(pem.encode()) for role, pem in pems.items()}


def gpu_chain(bmcsim) -> list[x509.Certificate]:
    """A GPU's SPDM chain down from its root: leaf, provisioner CA, device identity CA."""
    return [*read(in_band(bmcsim, secrets.token_bytes(32))[0]).chain, roots(bmcsim)["nvidia_device_root"]]


def rim_chain(bmcsim) -> list[x509.Certificate]:
    """The RIM signer and the RIM root."""
    [first, *_] = bmcsim.get("/bmcsim/v1/gpu-rims").json()["rims"]
    signer = signing_chain(requests.get(first["url"], timeout=10).content)[0]
    return [signer, roots(bmcsim)["nvidia_rim_root"]]


def ask(bmcsim, request_der: bytes) -> bytes:
    answer = bmcsim.post(OCSP, data=request_der, headers={"Content-Type": "application/ocsp-request"}, auth=None)
    assert answer.status_code == 200 and answer.headers["Content-Type"] == "application/ocsp-response"
    return answer.content


def test_the_roots_are_one_ca_per_trust_anchor_role(bmcsim):
    served = roots(bmcsim)
    assert set(served) == set(TrustAnchorRole.values)
    for certificate in served.values():
        assert certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        certificate.verify_directly_issued_by(certificate)
    assert bmcsim.get("/bmcsim/v1/roots/spdm").status_code == 404  # what it served is in /roots now


def test_import_trust_anchors_installs_every_role_from_bmcsim(bmcsim, db):
    out = StringIO()
    call_command("import_trust_anchors", f"{bmcsim.url}/bmcsim/v1/roots", stdout=out)
    served = bmcsim.get("/bmcsim/v1/roots").json()
    assert dict(TrustAnchor.objects.values_list("role", "pem")) == served
    assert out.getvalue().startswith(f"installed {', '.join(TrustAnchorRole.values)} from ")


def test_the_provisioner_ca_and_a_gpu_leaf_are_known_good_to_the_revocation_check(bmcsim):
    chain = gpu_chain(bmcsim)
    leaf, provisioner, root = chain
    answers = [ask(bmcsim, ocsp_request(leaf, provisioner)), ask(bmcsim, ocsp_request(provisioner, root))]
    now = datetime.now(UTC)
    assert revocation_failures(chain, answers, at=now) == []
    response = ocsp.load_der_ocsp_response(answers[1])
    single = single_response(response, provisioner, root)
    assert single is not None and single.certificate_status == ocsp.OCSPCertStatus.GOOD
    assert signature_problem(response, root, response.produced_at_utc) is None
    assert single.next_update_utc == single.this_update_utc + timedelta(days=1)
    assert revocation_failures(chain, answers, at=now + timedelta(days=2)) != []  # fresh for a day


def test_the_rim_signer_is_known_good_to_the_revocation_check(bmcsim):
    chain = rim_chain(bmcsim)
    signer, root = chain
    der = ask(bmcsim, ocsp_request(signer, root))
    assert revocation_failures(chain, [der], at=datetime.now(UTC)) == []
    response = ocsp.load_der_ocsp_response(der)
    assert single_response(response, signer, root) is not None
    assert signature_problem(response, root, response.produced_at_utc) is None


def test_a_get_request_and_sha1_cert_ids_and_a_nonce_are_answered_too(bmcsim):
    signer, root = rim_chain(bmcsim)
    nonce = secrets.token_bytes(16)
    request = (
        ocsp.OCSPRequestBuilder()
        .add_certificate(signer, root, hashes.SHA1())
        .add_extension(x509.OCSPNonce(nonce), critical=False)
        .build()
        .public_bytes(serialization.Encoding.DER)
    )
    answer = bmcsim.get(f"{OCSP}/{base64.b64encode(request).decode()}", auth=None)
    assert answer.status_code == 200
    assert revocation_failures([signer, root], [answer.content], at=datetime.now(UTC)) == []
    echoed = ocsp.load_der_ocsp_response(answer.content).extensions.get_extension_for_class(x509.OCSPNonce)
    assert echoed.value.nonce == nonce


def test_a_certificate_of_another_issuer_is_unauthorized_and_garbage_malformed(bmcsim):
    served = roots(bmcsim)
    # The GPU-vendor root is none of the responder's issuers: it asks after the root itself.
    vendor_root = served["gpu_vendor_root"]
    answer = ocsp.load_der_ocsp_response(ask(bmcsim, ocsp_request(vendor_root, vendor_root)))
    assert answer.response_status == ocsp.OCSPResponseStatus.UNAUTHORIZED
    garbage = ocsp.load_der_ocsp_response(ask(bmcsim, b"not DER"))
    assert garbage.response_status == ocsp.OCSPResponseStatus.MALFORMED_REQUEST
    wrong_type = bmcsim.post(OCSP, data=b"x", headers={"Content-Type": "text/plain"}, auth=None)
    assert wrong_type.status_code == 415
