"""NVIDIA's RIMs imported as reference values (attestation/gpu_rims_import.py, manage.py
import_gpu_rims): only those NVIDIA signed, checked against the imported RIM root, one signed
document per RIM id, retired by operators in the admin. The RIMs are NVIDIA's own
(tests/data/nvidia_rims/README.md)."""

from __future__ import annotations

import hashlib
import shutil
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from attestation.gpu_rims_import import RimDocument, RimRefused, import_gpu_rims
from attestation.models import GpuRim, TrustAnchor
from attestation.verifier.gpu_rims import read_rim
from bmcsim import gpu_rims
from bmcsim.pki import PKI
from bmcsim.store import Store

RIMS = Path(__file__).resolve().parent.parent / "data" / "nvidia_rims"
VBIOS_FILE = "1010_0200_882_96005E0001_PROD.swidtag"
VBIOS_ID = "NV_GPU_VBIOS_1010_0200_882_96005E0001"
DRIVER_FILE = "NV_GPU_DRIVER_GH100_550.144.03.xml"
# Inside the VBIOS RIM's validity (2023-06-23 to 2025-06-22) and the mismatching VBIOS RIM's (from 2023-12-13).
VBIOS_TIME = datetime(2024, 6, 1, tzinfo=UTC)
# Inside the driver RIM's (2024-12-30 to 2026-12-30).
DRIVER_TIME = datetime(2025, 6, 1, tzinfo=UTC)


def document(name: str) -> RimDocument:
    return RimDocument(name, (RIMS / name).read_bytes())


@pytest.fixture
def rim_root(db):
    return TrustAnchor.objects.create(role="nvidia_rim_root", pem=(RIMS / "verifier_RIM_root.pem").read_text())


def test_nvidias_vbios_rim_is_imported_under_nvidias_id_with_its_active_golden_values(rim_root):
    assert import_gpu_rims([document(VBIOS_FILE)], at=VBIOS_TIME) == {VBIOS_ID: "imported"}
    rim = GpuRim.objects.get()
    assert (rim.rim_id, rim.component, rim.version, rim.chip) == (VBIOS_ID, "vbios", "96.00.5e.00.01", "GH100")
    assert (rim.valid_from.date().isoformat(), rim.valid_until.date().isoformat()) == ("2023-06-23", "2025-06-22")
    golden = read_rim((RIMS / VBIOS_FILE).read_bytes()).golden
    assert rim.golden == {str(i): list(g.alternatives) for i, g in golden.items() if g.active}
    assert len(rim.golden) < len(golden)  # the inactive indexes left out
    assert all(len(digest) == 96 for alternatives in rim.golden.values() for digest in alternatives)
    assert rim.xml.encode() == (RIMS / VBIOS_FILE).read_bytes()
    assert rim.sha384 == hashlib.sha384(rim.xml.encode()).hexdigest()
    assert rim.retired_at is None


def test_nvidias_driver_rim_is_imported_under_its_chip_and_version(rim_root):
    assert import_gpu_rims([document(DRIVER_FILE)], at=DRIVER_TIME) == {"NV_GPU_DRIVER_GH100_550.144.03": "imported"}
    assert GpuRim.objects.get().component == "driver"


def test_the_same_document_again_changes_nothing(rim_root):
    import_gpu_rims([document(VBIOS_FILE)], at=VBIOS_TIME)
    imported_at = GpuRim.objects.get().imported_at
    assert import_gpu_rims([document(VBIOS_FILE)], at=VBIOS_TIME) == {VBIOS_ID: "unchanged"}
    assert GpuRim.objects.get().imported_at == imported_at


def test_another_signed_document_under_an_imported_id_is_refused(rim_root):
    import_gpu_rims([document(VBIOS_FILE)], at=VBIOS_TIME)
    other = "NV_GPU_VBIOS_1010_0200_882_96005E0001_measurement_mismatch.xml"
    with pytest.raises(RimRefused, match=rf"^{other}: {VBIOS_ID} is imported already, another signed document"):
        import_gpu_rims([document(other)], at=VBIOS_TIME)
    assert GpuRim.objects.get().sha384 == hashlib.sha384((RIMS / VBIOS_FILE).read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("name", "at", "reason"),
    [
        pytest.param("incorrect_signature_driver_rim.xml", DRIVER_TIME, "signature", id="tampered signature"),
        pytest.param("NV_GPU_DRIVER_GH100_535.86.09_measurement_mismatch.xml", DRIVER_TIME, "signature", id="edited"),
        pytest.param("incorrect_cert_chain_driver_rim.xml", DRIVER_TIME, "chain", id="another root"),
        pytest.param(VBIOS_FILE, datetime(2026, 1, 1, tzinfo=UTC), "validity", id="expired"),
    ],
)
def test_a_rim_nvidia_did_not_sign_valid_then_is_refused_with_its_file_and_why(rim_root, name, at, reason):
    with pytest.raises(RimRefused, match=rf"^{name}: not a RIM NVIDIA signed: {reason}"):
        import_gpu_rims([document(name)], at=at)
    assert not GpuRim.objects.exists()


def test_one_refused_rim_imports_none_of_the_others(rim_root):
    with pytest.raises(RimRefused):
        import_gpu_rims([document(DRIVER_FILE), document("incorrect_signature_driver_rim.xml")], at=DRIVER_TIME)
    assert not GpuRim.objects.exists()


def test_without_the_rim_root_nothing_is_imported(db):
    with pytest.raises(ValueError, match="trust anchor nvidia_rim_root not imported"):
        import_gpu_rims([document(VBIOS_FILE)], at=VBIOS_TIME)


def test_a_vbios_rim_whose_file_name_does_not_say_its_id_is_refused(rim_root):
    renamed = RimDocument("vbios.xml", (RIMS / VBIOS_FILE).read_bytes())
    with pytest.raises(RimRefused, match=r"^vbios.xml: a VBIOS RIM's file must be named as NVIDIA's"):
        import_gpu_rims([renamed], at=VBIOS_TIME)


def test_the_command_imports_every_rim_of_a_directory(rim_root, tmp_path):
    for name in (VBIOS_FILE, DRIVER_FILE):
        shutil.copy(RIMS / name, tmp_path / name)
    out = StringIO()
    # One time inside both RIMs' validity.
    call_command("import_gpu_rims", str(tmp_path), "--at", "2025-01-15T00:00:00+00:00", stdout=out)
    assert sorted(out.getvalue().splitlines()) == ["NV_GPU_DRIVER_GH100_550.144.03: imported", f"{VBIOS_ID}: imported"]


def test_the_command_refuses_naming_the_file(rim_root):
    with pytest.raises(CommandError, match=r"incorrect_signature_driver_rim.xml: not a RIM NVIDIA signed: signature"):
        call_command(
            "import_gpu_rims", str(RIMS / "incorrect_signature_driver_rim.xml"), "--at", DRIVER_TIME.isoformat()
        )


@pytest.fixture
def rim_server():
    """NVIDIA's RIM service as a local HTTP server: GET /v1/rim/<file> answers the file."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = RIMS / self.path.rsplit("/", 1)[-1]
            body = path.read_bytes() if path.is_file() else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/rim"
    server.shutdown()
    server.server_close()


def test_the_command_imports_a_rim_from_a_url(rim_root, rim_server):
    out = StringIO()
    call_command("import_gpu_rims", f"{rim_server}/{DRIVER_FILE}", "--at", DRIVER_TIME.isoformat(), stdout=out)
    assert out.getvalue() == "NV_GPU_DRIVER_GH100_550.144.03: imported\n"


def test_the_command_says_what_a_url_answered(rim_root, rim_server):
    with pytest.raises(CommandError, match="answered 404"):
        call_command("import_gpu_rims", f"{rim_server}/NV_GPU_DRIVER_GH100_999.1.xml")


def test_operators_retire_a_rim_and_return_it_to_service_in_the_admin(admin_client, rim_root):
    import_gpu_rims([document(VBIOS_FILE)], at=VBIOS_TIME)
    rim = GpuRim.objects.get()
    changelist = "/admin/attestation/gpurim/"
    answer = admin_client.post(changelist, {"action": "retire", "_selected_action": [rim.pk]})
    assert answer.status_code == 302
    rim.refresh_from_db()
    assert rim.retired_at is not None
    admin_client.post(changelist, {"action": "return_to_service", "_selected_action": [rim.pk]})
    rim.refresh_from_db()
    assert rim.retired_at is None


def test_a_rim_kept_from_under_a_replaced_rim_root_gives_way_to_the_one_that_verifies(db, tmp_path):
    """Two bmcsim fleets sign the same RIM ids under roots of their own: the demo's database outlives
    the simulator's state. Once the second root is the anchor, the first's RIMs verify no more."""
    first, second = (PKI(tmp_path / name, Store(tmp_path / name)) for name in ("first", "second"))
    rim_id = gpu_rims.driver_rim_id(gpu_rims.FACTORY_DRIVER)

    def rim_of(pki: PKI, name: str) -> RimDocument:
        xml = gpu_rims.document(pki, tmp_path / name, rim_id)
        assert xml is not None
        return RimDocument(rim_id, xml)

    def trust(pki: PKI) -> None:
        TrustAnchor.objects.update_or_create(role="nvidia_rim_root", defaults={"pem": pki.roots()["nvidia_rim_root"]})

    trust(first)
    assert import_gpu_rims([rim_of(first, "first")]) == {rim_id: "imported"}
    with pytest.raises(RimRefused, match="not a RIM NVIDIA signed: chain"):
        import_gpu_rims([rim_of(second, "second")])  # not under the anchor
    trust(second)
    assert import_gpu_rims([rim_of(second, "second")]) == {rim_id: "imported"}
    assert GpuRim.objects.get().xml.encode() == rim_of(second, "second").xml
