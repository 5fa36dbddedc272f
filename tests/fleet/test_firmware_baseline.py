"""Firmware baselines as operators keep them: the rows and their constraints, the admin, and
manage.py set_firmware_baseline (with the demo's baseline shipped in deploy/)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from bmcsim import bios as bmcsim_bios
from bmcsim import releases as bmcsim_releases
from fleet import firmware
from fleet.models import FirmwareBaseline, FirmwareBaselineComponent
from tests.support import REPO_ROOT

DIGEST = "ab" * 32
H100 = "NVIDIA H100 80GB HBM3"


def baseline(**fields) -> FirmwareBaseline:
    return FirmwareBaseline.objects.create(**{"name": "h100", "gpu_model": H100, **fields})


def component(row: FirmwareBaseline, **fields) -> FirmwareBaselineComponent:
    defaults = {"component": "BMC", "version": "1.4.2", "sha256": DIGEST, "image": "GF-BMC-1.4.2.bin"}
    return FirmwareBaselineComponent.objects.create(baseline=row, **{**defaults, **fields})


def refused(create) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        create()


def test_a_row_reads_as_the_pure_baseline(db):
    row = baseline(bios_attributes={"SriovEnable": True})
    component(row)
    component(row, component="NIC", version="22.41", image="")
    assert row.as_baseline() == firmware.Baseline(
        name="h100",
        gpu_model=H100,
        components={
            "BMC": firmware.Expected("1.4.2", DIGEST, "GF-BMC-1.4.2.bin"),
            "NIC": firmware.Expected("22.41", DIGEST, ""),
        },
        bios_attributes={"SriovEnable": True},
        secure_boot_required=True,
    )


def test_the_database_keeps_baselines_well_formed(db):
    row = baseline()
    component(row)
    refused(lambda: baseline(name="other"))  # one per node class
    refused(lambda: baseline(name="odd", gpu_model="x", bios_attributes=["SriovEnable"]))
    refused(lambda: baseline(name="odd", gpu_model="x", boot_releases={"kernel": "vmlinuz-6.8.0-49-generic"}))
    refused(lambda: component(row))  # once per baseline
    refused(lambda: component(row, component="NIC", sha256="AB" * 32))
    refused(lambda: component(row, component="NIC", version=""))
    refused(lambda: component(row, component="NIC", image="../../etc/passwd"))
    refused(lambda: component(row, component="NIC", image="http://elsewhere/x.bin"))
    refused(lambda: component(row, component="/NIC"))


@pytest.mark.parametrize("boot_releases", [["vmlinuz-6.8.0-49-generic", "vmlinuz-6.8.0-49-generic"], [""], [42]])
def test_full_clean_refuses_boot_releases_that_are_not_distinct_names(db, boot_releases):
    row = FirmwareBaseline(name="x", boot_releases=boot_releases)
    with pytest.raises(ValidationError) as refusal:
        row.full_clean()
    assert "boot_releases" in refusal.value.message_dict


def test_full_clean_refuses_bios_attributes_that_are_not_scalars(db):
    row = FirmwareBaseline(name="x", bios_attributes={"SriovEnable": {"nested": True}})
    with pytest.raises(ValidationError) as refusal:
        row.full_clean()
    assert "bios_attributes" in refusal.value.message_dict


def test_operators_add_a_baseline_with_its_components_in_the_admin(admin_client, db):
    form = {
        "name": "h100",
        "gpu_model": H100,
        "bios_attributes": '{"SriovEnable": true}',
        "secure_boot_required": "on",
        "components-TOTAL_FORMS": "2",
        "components-INITIAL_FORMS": "0",
        "components-0-component": "BIOS",
        "components-0-version": "GF-BIOS 2.4.0",
        "components-0-sha256": DIGEST,
        "components-0-image": "GF-BIOS-2.4.0.bin",
        "components-1-component": "BMC",
        "components-1-version": "1.4.2",
        "components-1-sha256": "not hex",
    }
    answer = admin_client.post("/admin/fleet/firmwarebaseline/add/", form)
    assert answer.status_code == 200 and not FirmwareBaseline.objects.exists()  # shown again, with the error
    answer = admin_client.post("/admin/fleet/firmwarebaseline/add/", {**form, "components-1-sha256": DIGEST})
    assert answer.status_code == 302, answer.content
    assert FirmwareBaseline.objects.get().as_baseline().components["BIOS"].image == "GF-BIOS-2.4.0.bin"
    assert admin_client.get("/admin/fleet/firmwarebaseline/").status_code == 200


def test_the_command_sets_each_node_class_baseline_whole(db, tmp_path):
    document = {
        "baselines": [
            {"name": "h100", "gpu_model": H100, "components": {"BMC": {"version": "1", "sha256": DIGEST}}},
            {"name": "default", "components": {"BIOS": {"version": "2", "sha256": DIGEST, "image": "b.bin"}}},
        ]
    }
    source = tmp_path / "baseline.json"
    source.write_text(json.dumps(document))
    out = StringIO()
    call_command("set_firmware_baseline", str(source), stdout=out)
    assert "2 firmware baselines added, 0 replaced" in out.getvalue()

    document["baselines"] = [
        {"name": "h100-v2", "gpu_model": H100, "components": {"VBIOS": {"version": "3", "sha256": DIGEST}}}
    ]
    source.write_text(json.dumps(document))
    call_command("set_firmware_baseline", str(source), stdout=out)
    assert "0 firmware baselines added, 1 replaced" in out.getvalue()
    h100 = FirmwareBaseline.objects.get(gpu_model=H100)
    assert (h100.name, list(h100.components.values_list("component", flat=True))) == ("h100-v2", ["VBIOS"])
    assert FirmwareBaseline.objects.count() == 2


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ({"baselines": [{"name": "x", "components": {"BMC": {"version": "1"}}}]}, "components.BMC.sha256"),
        ({"baselines": [{"name": "x"}]}, "components: must name at least one component"),
        (
            {
                "baselines": [
                    {"name": "default", "gpu_model": H100, "components": {"BMC": {"version": "1", "sha256": DIGEST}}}
                ]
            },
            "unique",  # the name another node class's baseline has
        ),
    ],
)
def test_the_command_refuses_a_malformed_or_clashing_document(db, tmp_path, document, error):
    FirmwareBaseline.objects.create(name="default", gpu_model="")
    source = tmp_path / "baseline.json"
    source.write_text(json.dumps(document))
    with pytest.raises(CommandError, match=error):
        call_command("set_firmware_baseline", str(source), stdout=StringIO())


def test_the_demo_baseline_takes_bmcsims_newest_releases_and_holds_its_factory_bios(db, tmp_path):
    """What `make demo` sets: deploy/firmware-baseline.json with bmcsim's release list, which a
    factory-fresh bmcsim node runs (but for Secure Boot, off from its factory: inspection turns it on)."""
    releases = tmp_path / "firmware-releases.json"
    releases.write_text(json.dumps(bmcsim_releases.firmware_reference()))
    demo = str(REPO_ROOT / "deploy" / "firmware-baseline.json")
    call_command("set_firmware_baseline", demo, "--releases", str(releases), stdout=StringIO())
    default = FirmwareBaseline.objects.get().as_baseline()
    assert default.gpu_model == "" and default.secure_boot_required
    assert default.components["BMC"] == firmware.Expected(
        "GF-BMC 1.5.0", bmcsim_releases.firmware_digest("BMC", "GF-BMC 1.5.0"), "GF-BMC-1.5.0.bin"
    )
    assert set(default.components) == {"BIOS", "BMC", "VBIOS", "NIC"}
    assert default.bios_attributes.items() <= bmcsim_bios.DEFAULTS.items()
    # Pinned to the boot chain and GPU driver a factory-fresh node boots, its newest.
    factory_releases = {bmcsim_releases.BOOT_RELEASES[c][-1] for c in bmcsim_releases.BOOT_COMPONENTS}
    assert set(default.boot_releases) == factory_releases - {"GF-BIOS 2.4.0"} | {
        bmcsim_releases.GPU_RELEASES["driver"][-1]
    }


def test_a_malformed_release_list_is_refused(db, tmp_path):
    releases = tmp_path / "firmware-releases.json"
    releases.write_text(json.dumps({"hash_algorithm": "md5", "components": {}}))
    demo = str(REPO_ROOT / "deploy" / "firmware-baseline.json")
    with pytest.raises(CommandError, match="hash_algorithm"):
        call_command("set_firmware_baseline", demo, "--releases", str(releases), stdout=StringIO())
