"""The simulated GPUs' RIMs (bmcsim/gpu_rims.py): signed as NVIDIA signs its own, so our RIM
verifier takes them against the RIM root bmcsim serves; their golden values are what the GPUs'
out-of-band SPDM measurements give, a tampered measurement fails them, and manage.py
import_gpu_rims imports them from bmcsim's URLs."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from io import StringIO

import requests
from django.core.management import call_command

from attestation.models import GpuRim, TrustAnchor
from attestation.verifier import load_trust_anchor
from attestation.verifier.gpu_rims import Rim, compare_measurements, read_rim, verify_rim
from tests.bmcsim.test_component_integrity import TAMPERED_INDEX, evidence_of

VBIOS_RIMS = {"NV_GPU_VBIOS_1010_0200_882_9600740001", "NV_GPU_VBIOS_1010_0200_882_9600990001"}
DRIVER_RIM = "NV_GPU_DRIVER_GH100_560.35.03"


def served_rims(bmcsim) -> dict[str, tuple[str, bytes]]:
    """{rim_id: (url, XML)} of every RIM bmcsim lists."""
    listing = bmcsim.get("/bmcsim/v1/gpu-rims").json()["rims"]
    rims = {}
    for rim in listing:
        answer = requests.get(rim["url"], timeout=10)
        assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("application/xml")
        rims[rim["rim_id"]] = (rim["url"], answer.content)
    return rims


def rim_root_pem(bmcsim) -> str:
    return bmcsim.get("/bmcsim/v1/roots").json()["nvidia_rim_root"]


def rims_of(bmcsim, evidence) -> tuple[Rim, Rim]:
    """The VBIOS and driver RIMs of the releases the evidence names, as the control plane picks them."""
    rims = [read_rim(xml) for _url, xml in served_rims(bmcsim).values()]
    [vbios] = [r for r in rims if r.component == "vbios" and r.version == evidence.vbios_version.lower()]
    [driver] = [r for r in rims if r.component == "driver" and r.version == evidence.driver_version]
    return vbios, driver


def mismatches(bmcsim, evidence) -> list[str]:
    measured = {index - 1: block.value for index, block in evidence.measurements.items()}
    return [failure for rim in rims_of(bmcsim, evidence) for failure in compare_measurements(rim.golden, measured)]


def test_each_served_rim_verifies_against_the_served_rim_root_now(bmcsim):
    root = load_trust_anchor("nvidia_rim_root", rim_root_pem(bmcsim))
    rims = served_rims(bmcsim)
    assert set(rims) == {*VBIOS_RIMS, DRIVER_RIM}
    for rim_id, (_url, xml) in rims.items():
        assert verify_rim(xml, root=root, at=datetime.now(UTC)) == [], rim_id
        rim = read_rim(xml)
        assert rim.chip == "GH100" and rim.component == ("driver" if rim_id == DRIVER_RIM else "vbios")
        assert len(rim.golden) == 64
    assert served_rims(bmcsim) == rims  # signed once: the same document at every request
    assert bmcsim.get("/bmcsim/v1/gpu-rims/NV_GPU_DRIVER_GH100_1.2.3").status_code == 404


def test_each_rim_is_active_on_the_indices_its_component_owns(bmcsim):
    rims = {rim_id: read_rim(xml).golden for rim_id, (_url, xml) in served_rims(bmcsim).items()}
    vbios_indices = {*range(0, 7), *range(8, 13)}  # SPDM blocks 1-7 and 9-13, less one
    for rim_id in VBIOS_RIMS:
        assert {i for i, golden in rims[rim_id].items() if golden.active} == vbios_indices
    assert {i for i, golden in rims[DRIVER_RIM].items() if golden.active} == set(range(64)) - vbios_indices


def test_a_gpus_signed_measurements_match_its_vbios_and_driver_rims(bmcsim):
    evidence = evidence_of(bmcsim, secrets.token_bytes(32))
    vbios, driver = rims_of(bmcsim, evidence)
    assert (vbios.version, driver.version) == ("96.00.99.00.01", "560.35.03")  # the factory releases
    assert mismatches(bmcsim, evidence) == []


def test_a_tampered_measurement_fails_the_vbios_rim_at_that_index(bmcsim):
    fault = {"node": "node-002", "kind": "gpu_measurement_tamper", "gpu": 3}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    [failure] = mismatches(bmcsim, evidence_of(bmcsim, secrets.token_bytes(32)))
    assert failure.startswith(f"index {TAMPERED_INDEX - 1}: measured ")


def test_import_gpu_rims_imports_each_served_rim_under_its_id(bmcsim, db):
    TrustAnchor.objects.create(role="nvidia_rim_root", pem=rim_root_pem(bmcsim))
    rims = served_rims(bmcsim)
    for rim_id, (url, _xml) in rims.items():
        out = StringIO()
        call_command("import_gpu_rims", url, stdout=out)
        assert out.getvalue() == f"{rim_id}: imported\n"
    assert set(GpuRim.objects.values_list("rim_id", flat=True)) == set(rims)
    assert GpuRim.objects.get(rim_id=DRIVER_RIM).xml.encode() == rims[DRIVER_RIM][1]
    out = StringIO()
    call_command("import_gpu_rims", rims[DRIVER_RIM][0], stdout=out)
    assert out.getvalue() == f"{DRIVER_RIM}: unchanged\n"
