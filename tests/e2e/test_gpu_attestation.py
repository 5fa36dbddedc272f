"""The GPUs' SPDM evidence end to end: an inspection run by the workflow engine against bmcsim,
which gives each GPU's signed measurements in band (its agent) and out of band (its BMC's
ComponentIntegrity), appraised under the shipped policy (both sources) against bmcsim's simulated
NVIDIA roots, its signed RIMs and its OCSP responder. A clean node affirms; a tampered VBIOS
measurement, a replayed nonce, a broken chain, a retired driver and missing revocation data each
quarantine the node with their own reason, in the signed result per GPU and source."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command
from django.utils import timezone
from gpufleet_client.offline_verification import verify_result

from attestation import services as attestation_services
from attestation.models import AttestationResult, GpuRim, OcspResponse
from fleet.models import Node
from fleet.services import transition
from workflows import node_workflows as workflows

FAULTY_GPU = 1


def inspect(node: Node) -> Node:
    transition(node_id=node.pk, event="inspection_started", actor="test")
    for _ in range(20):
        if workflows.run_workflow(node_id=node.pk, worker="test") == "done":
            break
    return Node.objects.get(pk=node.pk)


def failures(node: Node) -> set[tuple[str, str]]:
    result = AttestationResult.objects.filter(node=node).first()
    assert result is not None
    return {(f["code"], f["component"]) for f in result.failures}


def statuses(node: Node) -> dict[tuple[int, str], str]:
    """What each GPU's evidence came to, as signed into the node's latest result."""
    result = AttestationResult.objects.filter(node=node).first()
    assert result is not None
    claims = verify_result(result.token, attestation_services.public_keys())
    assert claims["gpus"] == result.gpu_evidence
    return {(g["index"], g["gpu_evidence"]["source"]): g["gpu_evidence"]["status"] for g in claims["gpus"]}


def test_the_gpus_evidence_from_both_sources_decides_each_inspection(
    bmcsim, control_plane, transactional_db, live_server, settings
):
    settings.CONFIG_DRIVE_BASE_URL = live_server.url  # where the BMCs fetch this process's boots' drives
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    nodes = list(Node.objects.order_by("name"))
    control_plane.configure_attestation()

    # No OCSP answer kept, and none to be fetched (an air-gapped plane): not known unrevoked.
    settings.GPUFLEET_OCSP_FETCH = False
    unchecked = inspect(nodes[0])
    assert unchecked.state == "quarantined"
    assert {code for code, _ in failures(unchecked)} == {"gpu_revocation"}
    assert not OcspResponse.objects.exists()

    settings.GPUFLEET_OCSP_FETCH = True  # from bmcsim's responder (the control plane's settings name it)
    clean = inspect(nodes[1])
    assert clean.state == "available", clean.quarantine_reason
    assert set(statuses(clean).values()) == {"affirming"} and len(statuses(clean)) == 8 * 2
    assert OcspResponse.objects.filter(source="fetched").count() >= 2  # the provisioner CA's, the RIM signer's

    for node, kind, code, component in (
        (nodes[2], "gpu_measurement_tamper", "gpu_measurement", "{source}.vbios"),
        (nodes[3], "gpu_wrong_nonce", "gpu_nonce", "{source}"),
        (nodes[4], "gpu_broken_chain", "gpu_chain", "{source}"),
    ):
        answer = bmcsim.post("/bmcsim/v1/faults", json={"node": node.name, "kind": kind, "gpu": FAULTY_GPU})
        assert answer.status_code in (200, 201), answer.text
        faulty = inspect(node)
        assert faulty.state == "quarantined", kind
        expected = {
            (code, f"gpu{FAULTY_GPU}." + component.format(source=source)) for source in ("in_band", "out_of_band")
        }
        assert failures(faulty) == expected, kind
        assert {k for k, status in statuses(faulty).items() if status != "affirming"} == {
            (FAULTY_GPU, "in_band"),
            (FAULTY_GPU, "out_of_band"),
        }

    GpuRim.objects.filter(component="driver").update(retired_at=timezone.now())
    retired = inspect(nodes[5])
    assert retired.state == "quarantined"
    assert {code for code, _ in failures(retired)} == {"release_retired"}
    assert len(failures(retired)) == 8 * 2  # every GPU, both sources: `gpu<i>.<source>.driver`
