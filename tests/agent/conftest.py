"""What the agent's TPM tests share: a software TPM per test, and the trust anchors a verifier
of its evidence starts from."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from attestation.verifier import TrustedRoots
from tests.support.ak_certificates import ca_certificate
from tests.support.swtpm import SoftwareTPM


@pytest.fixture(scope="module")
def manufacturer_ca() -> tuple[ec.EllipticCurvePrivateKey, str]:
    return ca_certificate("Test Manufacturer Root CA")


@pytest.fixture(scope="module")
def roots(manufacturer_ca) -> TrustedRoots:
    _, gpu_vendor_root = ca_certificate("Test GPU Vendor Root CA")
    return TrustedRoots.from_pem(
        manufacturer_ca=manufacturer_ca[1], gpu_vendor_root=gpu_vendor_root, valid_at=datetime.now(UTC)
    )


@pytest.fixture
def tpm(tmp_path):
    directory = tmp_path / "tpm"
    directory.mkdir()
    software_tpm = SoftwareTPM(directory)
    yield software_tpm
    software_tpm.stop()
