"""The simulated GPUs' reference integrity manifests (RIMs), signed as NVIDIA signs its own.

One RIM per VBIOS release (releases.GPU_RELEASES) and one for the factory driver, the one every
GPU's SPDM responder measures (bmcsim/spdm.py). Each is a SWID tag in the layout of NVIDIA's
(tests/data/nvidia_rims/): `Meta` names the release and the chip, `Payload` has a `Resource` for
each of the 64 measurement indices (an SPDM block's index less one), active on the blocks its
component owns (the VBIOS: spdm.VBIOS_INDICES; the driver: the others) with the golden digest the
responder produces for that release, inactive and zero elsewhere. An enveloped XML-DSig signature
(ECDSA P-384 over SHA-384, URI "") covers the whole document; its KeyInfo carries the signer's
certificate and the RIM signing root (pki.PKI.rim_root, `nvidia_rim_root` of GET /bmcsim/v1/roots).

RIM ids and file names are NVIDIA's: NV_GPU_DRIVER_GH100_560.35.03 and, for a VBIOS,
NV_GPU_VBIOS_<project>_<sku>_<chip sku>_<version without dots>. ECDSA signatures differ at each
signing, so each RIM is signed once per data directory and kept there: an importer that sees a RIM
twice sees the same document.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lxml import etree
from signxml import CanonicalizationMethod, DigestAlgorithm, SignatureMethod, XMLSigner

from . import releases, spdm
from .pki import PKI
from .store import atomic_write

CHIP = "GH100"
# The H100 SXM5 80GB board NVIDIA's own Hopper VBIOS RIMs are named after (project, SKU, chip SKU).
BOARD = "1010_0200_882"
ZERO_DIGEST = "00" * 48
SWID = "http://standards.iso.org/iso/19770/-2/2015/schema.xsd"
SHA384 = "http://www.w3.org/2001/04/xmlenc#sha384"
TCG_RIM = "https://trustedcomputinggroup.org/resource/tcg-reference-integrity-manifest-rim-information-model/"
FACTORY_DRIVER = releases.GPU_RELEASES["driver"][-1]


def vbios_rim_id(release: str) -> str:
    return f"NV_GPU_VBIOS_{BOARD}_{release.replace('.', '').upper()}"


def driver_rim_id(release: str) -> str:
    return f"NV_GPU_DRIVER_{CHIP}_{release}"


def catalogue() -> dict[str, tuple[str, str]]:
    """Every RIM bmcsim publishes: {rim_id: (component, release)}, VBIOS releases first."""
    rims = {vbios_rim_id(release): ("vbios", release) for release in releases.GPU_RELEASES["vbios"]}
    rims[driver_rim_id(FACTORY_DRIVER)] = ("driver", FACTORY_DRIVER)
    return rims


def golden_values(component: str, release: str) -> dict[int, str | None]:
    """By RIM index (a block's index less one): the hex digest of each block the component owns, None for the others."""
    if component == "vbios":
        image = releases.firmware_digest("VBIOS", release)
        return {
            block - 1: spdm.vbios_measurement(block, image).hex() if block in spdm.VBIOS_INDICES else None
            for block in spdm.BLOCKS
        }
    return {
        block - 1: None if block in spdm.VBIOS_INDICES else spdm.driver_measurement(block, release).hex()
        for block in spdm.BLOCKS
    }


def document(pki: PKI, directory: Path, rim_id: str) -> bytes | None:
    """The signed RIM of that id, signed on first use and kept under `directory`; None for no such RIM."""
    published = catalogue().get(rim_id)
    if published is None:
        return None
    path = directory / "gpu-rims" / f"{rim_id}.xml"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, _signed(pki, rim_id, *published), mode=0o644)
    return path.read_bytes()


def _signed(pki: PKI, rim_id: str, component: str, release: str) -> bytes:
    # Written as NVIDIA writes its RIMs, prefixes and attribute order included.
    resources = "".join(
        f'<ns0:Resource type="Measurement" index="{index}" active="{digest is not None}" alternatives="1"'
        f' ns2:Hash0="{digest or ZERO_DIGEST}" name="Measurement_{index}" size="48"/>'
        for index, digest in golden_values(component, release).items()
    )
    tag_id = hashlib.sha384(f"bmcsim/gpu-rim/{rim_id}".encode()).hexdigest()
    xml = (
        f'<SoftwareIdentity xmlns="{SWID}" xmlns:ns0="{SWID}" xmlns:ns2="{SHA384}" corpus="false" name="{CHIP}"'
        f' patch="false" supplemental="false" tagId="{tag_id}" version="1.0" tagVersion="0">'
        '<ns0:Entity name="bmcsim" role="softwareCreator tagCreator"/>'
        f'<ns0:Meta xmlns:ns1="{TCG_RIM}" colloquialVersion="{release.upper() if component == "vbios" else release}"'
        f' edition="GPU" product="{CHIP}" revision="r1" PayloadType="direct" ns1:BindingSpec="RIMIM"'
        ' ns1:BindingSpecVersion="1.01" ns1:PlatformManufacturerStr="bmcsim"'
        f' ns1:PlatformModel="{CHIP}" ns1:FirmwareManufacturer="bmcsim"/>'
        f'<ns0:Payload xmlns:SHA384="{SHA384}">{resources}</ns0:Payload>'
        "</SoftwareIdentity>"
    )
    signer = XMLSigner(
        signature_algorithm=SignatureMethod.ECDSA_SHA384,
        digest_algorithm=DigestAlgorithm.SHA384,
        c14n_algorithm=CanonicalizationMethod.CANONICAL_XML_1_1,
    )
    # KeyInfo's chain as NVIDIA's: the signer first, the root last.
    signed = signer.sign(etree.fromstring(xml.encode()), key=pki.rim_signer_key, cert=[pki.rim_signer, pki.rim_root])
    return etree.tostring(signed, xml_declaration=False, encoding="utf-8")
