"""The firmware check at inspection, against a fake BMC whose FirmwareInventory, BIOS and Secure
Boot behave as Redfish's do: a node that runs its baseline goes straight on; a repairable drift is
flashed, patched and rebooted, read again, and recorded; anything else quarantines firmware_drift."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from fleet import selectors
from fleet.models import AuditEvent, FirmwareBaseline, FirmwareBaselineComponent, Node
from tests.support.factories import drive
from tests.support.fake_hardware import FakeAgent, FakeBMC
from tests.support.time_passing import lease_runs_out
from workflows import node_workflows
from workflows.agent import AgentCannot
from workflows.clients import Clients
from workflows.node_workflows import inspection
from workflows.redfish import BMCPermanentError

INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
RELEASES = {"BIOS": "2.4.0", "BMC": "1.4.2", "VBIOS": "96.00.99.00.01", "NIC": "22.41.1000"}
KIND = {"BIOS": "BIOS", "BMC": "BMC", "NIC0": "NIC", **{f"GPU{i} VBIOS": "VBIOS" for i in range(8)}}
IMAGE_BASE = "http://images.test/firmware"


def sha(kind: str, version: str) -> str:
    return hashlib.sha256(f"{kind} {version}".encode()).hexdigest()


class FirmwareBMC(FakeBMC):
    """One node's BMC. A flash installs the image's release (named in its file) when its task is
    polled, the BIOS's at the next reset; BIOS settings and Secure Boot change at the next reset."""

    def __init__(self, node: Node, log: list[str]):
        super().__init__(log)
        self.system_path = f"/redfish/v1/Systems/{node.system_id}"
        self.node = node.system_id
        self.running = {name: (RELEASES[kind], sha(kind, RELEASES[kind])) for name, kind in KIND.items()}
        self.attributes = {"SriovEnable": True, "BootMode": "Uefi"}
        self.secure = {"SecureBootEnable": True, "SecureBootCurrentBoot": "Enabled", "SecureBootMode": "DeployedMode"}
        self.pending_bios: str | None = None
        self.pending_settings: dict = {}
        self.tasks: dict[str, tuple[str, str]] = {}  # monitor -> (component, release)
        self.tampered: set[str] = set()  # what survives a reflash
        self.task_polls = 0  # how often a task says Running before it ends
        self.failing_tasks = False
        self.refusing_updates = False

    def tamper(self, name: str, *, survives: bool = False) -> None:
        self.running[name] = (self.running[name][0] + "-x", "f" * 64)
        if survives:
            self.tampered.add(name)

    # the workflow's calls
    def reset(self, reset_type: str) -> None:
        super().reset(reset_type)
        if self.pending_bios is not None:
            self._install("BIOS", self.pending_bios)
            self.pending_bios = None
        self.attributes.update(self.pending_settings)
        self.pending_settings = {}
        self.secure["SecureBootCurrentBoot"] = "Enabled" if self.secure["SecureBootEnable"] else "Disabled"

    def managers(self) -> list[str]:
        return ["/redfish/v1/Managers/bmc"]

    def firmware_inventory(self) -> list[dict]:
        items = []
        for name, (version, sha) in self.running.items():
            gpu = name.split()[0] if name.endswith("VBIOS") else None
            related = f"{self.system_path}/Processors/{gpu}" if gpu else self.system_path
            items.append(
                {
                    "@odata.id": f"{INVENTORY}/{self.node}-{name.replace(' ', '-')}",
                    "Id": f"{self.node}-{name.replace(' ', '-')}",
                    "Version": version,
                    "SoftwareId": KIND.get(name, name),
                    "RelatedItem": [{"@odata.id": related}],
                    "Measurement": {"Measurement": sha},
                }
            )
        return items

    def simple_update(self, image: str, target: str) -> str:
        if self.refusing_updates:
            raise BMCPermanentError(self.node, f"SimpleUpdate {image}", "400 the image is not signed")
        self.log.append(f"flash {image.removeprefix(IMAGE_BASE + '/')} onto {target}")
        release = image.rsplit("/", 1)[-1].split("-", 2)[-1].removesuffix(".bin")
        if target == self.system_path:
            component = "BIOS"
        else:
            component = next(n for n in self.running if target.endswith(f"{self.node}-{n.replace(' ', '-')}"))
        monitor = f"/redfish/v1/TaskService/TaskMonitors/{len(self.tasks)}"
        self.tasks[monitor] = (component, release)
        return monitor

    def task_status(self, monitor: str) -> tuple[bool, str]:
        if self.task_polls:
            self.task_polls -= 1
            return False, "Running"
        if self.failing_tasks:
            return True, "Exception: Firmware update failed."
        component, release = self.tasks[monitor]
        if component == "BIOS":
            self.pending_bios = release
        else:
            self._install(component, release)
        return True, "Completed"

    def _install(self, component: str, release: str) -> None:
        if component not in self.tampered:
            self.running[component] = (release, sha(KIND[component], release))

    def bios_attributes(self) -> dict:
        return dict(self.attributes)

    def set_bios_settings(self, attributes: dict) -> None:
        self.log.append(f"bios settings {attributes}")
        self.pending_settings.update(attributes)

    def secure_boot(self) -> dict:
        return dict(self.secure)

    def enable_secure_boot(self) -> None:
        self.log.append("enable secure boot")
        self.secure["SecureBootEnable"] = True


class AgentWithoutDCGM(FakeAgent):
    def start_diagnostics(self, level: int) -> dict:
        raise AgentCannot("node: agent diagnostics: no DCGM here")


@pytest.fixture
def bmc(node, settings) -> FirmwareBMC:
    settings.FIRMWARE_IMAGE_BASE_URL = IMAGE_BASE
    drive(node, "inspection_started")
    return FirmwareBMC(node, [])


@pytest.fixture
def baseline(db) -> FirmwareBaseline:
    row = FirmwareBaseline.objects.create(
        name="h100", gpu_model="NVIDIA H100 80GB HBM3", bios_attributes={"SriovEnable": True}
    )
    for kind, release in RELEASES.items():
        image = "" if kind == "NIC" else f"GF-{kind}-{release}.bin"
        FirmwareBaselineComponent.objects.create(
            baseline=row, component=kind, version=release, sha256=sha(kind, release), image=image
        )
    return row


def inspect(node: Node, bmc: FirmwareBMC) -> str:
    """Inspect the node with the fake BMC and an agent that cannot run diagnostics."""
    clients = Clients(bmc=lambda node: bmc, agent=AgentWithoutDCGM)
    return node_workflows.run_workflow(node_id=node.pk, worker="test", clients=clients)


def steps(node: Node) -> list[str]:
    rows = AuditEvent.objects.filter(node=node, event="step_changed", from_state="inspecting")
    return list(rows.order_by("id").values_list("reason", flat=True))


def checked(node: Node) -> dict | None:
    return selectors.firmware_checked_in_this_state(Node.objects.get(pk=node.pk))


def checked_facts(node: Node) -> dict:
    facts = checked(node)
    assert facts is not None, "the firmware was not checked"
    return facts


REPAIR_STEPS = ["check_firmware", "finish_firmware_update", "recheck_firmware"]
AFTER = ["check_inventory", "start_diagnostics", "wait_for_diagnostics", "attest"]


def test_without_a_baseline_firmware_is_not_checked(node, bmc):
    assert inspect(node, bmc) == "paused at attest"  # attestation is not configured here
    assert steps(node) == ["boot_service_image", "wait_for_agent", "check_firmware", *AFTER]
    assert checked(node) is None and inspection.to_appraise(node).firmware is None


def test_a_node_that_runs_its_baseline_goes_straight_on_with_its_firmware_recorded(node, bmc, baseline):
    assert inspect(node, bmc) == "paused at attest"
    assert steps(node) == ["boot_service_image", "wait_for_agent", "check_firmware", *AFTER]
    assert bmc.log == ["insert_config_drive", "insert_media", "reset"]  # the service image's boot, and nothing written
    facts = checked_facts(node)
    assert facts["baseline"] == "h100" and facts["repaired"] == [] and facts["secure_boot"] == "Enabled"
    assert facts["components"]["GPU3 VBIOS"] == {"version": "96.00.99.00.01", "digest": sha("VBIOS", "96.00.99.00.01")}
    assert len(facts["components"]) == 11
    assert inspection.to_appraise(node).firmware == facts


def test_the_default_baseline_applies_where_no_class_has_one(node, bmc, baseline):
    FirmwareBaseline.objects.filter(pk=baseline.pk).update(gpu_model="another GPU")
    assert selectors.firmware_baseline_for(node_id=node.pk) is None
    FirmwareBaseline.objects.filter(pk=baseline.pk).update(gpu_model="")
    found = selectors.firmware_baseline_for(node_id=node.pk)
    assert found is not None and found.name == "h100"


def test_a_tampered_bmc_is_reflashed_read_again_and_recorded_as_repaired(node, bmc, baseline):
    bmc.tamper("BMC")
    assert inspect(node, bmc) == "paused at attest"
    assert steps(node) == ["boot_service_image", "wait_for_agent", *REPAIR_STEPS, *AFTER]
    flash = f"flash GF-BMC-1.4.2.bin onto {INVENTORY}/node-001-BMC"
    assert bmc.log == [
        "insert_config_drive",
        "insert_media",
        "reset",
        flash,
    ]  # a BMC applies its own firmware: no reboot
    facts = checked_facts(node)
    assert facts["repaired"] == ["BMC"] and facts["components"]["BMC"]["version"] == "1.4.2"
    row = AuditEvent.objects.get(node=node, event="firmware_checked")
    assert row.reason == "matches baseline h100 after repairing BMC"
    started = AuditEvent.objects.get(node=node, event="step_changed", reason="finish_firmware_update")
    assert started.detail["repairing"] == ["BMC"] and started.detail["drifts"][0].startswith("BMC expected 1.4.2")


def test_bios_firmware_settings_and_secure_boot_are_repaired_through_a_reboot(node, bmc, baseline):
    bmc.tamper("BIOS")
    bmc.attributes["SriovEnable"] = False
    bmc.secure.update(SecureBootEnable=False, SecureBootCurrentBoot="Disabled")
    assert inspect(node, bmc) == "paused at attest"
    assert bmc.log == [
        "insert_config_drive",
        "insert_media",
        "reset",
        "flash GF-BIOS-2.4.0.bin onto /redfish/v1/Systems/node-001",
        "bios settings {'SriovEnable': True}",
        "enable secure boot",
        "insert_config_drive",  # the service image again, with a new drive: the BIOS flash, settings
        "insert_media",  # and Secure Boot need a boot
        "reset",
    ]
    assert checked_facts(node)["repaired"] == ["BIOS", "BIOS attribute SriovEnable", "Secure Boot"]


def test_firmware_that_survives_its_reflash_quarantines_firmware_drift(node, bmc, baseline):
    bmc.tamper("BMC", survives=True)
    assert inspect(node, bmc) == "firmware_drift"
    node.refresh_from_db()
    assert node.state == "quarantined"
    assert node.quarantine_reason == (
        f"firmware_drift: BMC expected 1.4.2 (sha256 {sha('BMC', '1.4.2')[:16]}…) "
        f"found 1.4.2-x (sha256 {'f' * 16}…) (after repairing BMC)"
    )
    assert checked(node) is None


def test_a_failed_reflash_quarantines_firmware_drift_naming_the_drift(node, bmc, baseline):
    bmc.tamper("GPU5 VBIOS")
    bmc.failing_tasks = True
    assert inspect(node, bmc) == "firmware_drift"
    reason = Node.objects.get(pk=node.pk).quarantine_reason
    assert reason.startswith("firmware_drift: GPU5 VBIOS expected 96.00.99.00.01")
    assert reason.endswith("; the reflash of GPU5 VBIOS ended Exception: Firmware update failed.")


def test_a_refused_reflash_quarantines_firmware_drift(node, bmc, baseline):
    bmc.tamper("BMC")
    bmc.refusing_updates = True
    assert inspect(node, bmc) == "firmware_drift"
    assert "the BMC refused the repair" in Node.objects.get(pk=node.pk).quarantine_reason


def test_a_reflash_that_outlasts_its_timeout_quarantines_firmware_drift(node, bmc, baseline, settings):
    settings.FIRMWARE_UPDATE_TIMEOUT = 0
    bmc.tamper("BMC")
    bmc.task_polls = 1000
    assert inspect(node, bmc) == "firmware_drift"
    assert "timed out after 0s waiting for the firmware updates" in Node.objects.get(pk=node.pk).quarantine_reason


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda bmc: bmc.tamper("NIC0"), "NIC0 expected 22.41.1000"),  # no image to repair it with
        (lambda bmc: bmc.running.update({"FPGA0": ("7", "5" * 64)}), "FPGA0 expected nothing"),
        (lambda bmc: bmc.attributes.pop("SriovEnable"), "BIOS attribute SriovEnable expected true"),
    ],
    ids=["no-image", "unknown-component", "attribute-this-bios-lacks"],
)
def test_a_drift_nothing_can_repair_quarantines_at_once_touching_nothing(node, bmc, baseline, spoil, reason):
    bmc.tamper("BMC")  # repairable, but the node is quarantined as it was found
    spoil(bmc)
    assert inspect(node, bmc) == "firmware_drift"
    found = Node.objects.get(pk=node.pk).quarantine_reason
    assert found.startswith("firmware_drift: BMC expected 1.4.2") and reason in found
    assert bmc.log == ["insert_config_drive", "insert_media", "reset"]


def test_a_long_reflash_parks_the_node_and_resumes_without_flashing_again(node, bmc, baseline, settings):
    settings.WORKFLOW_HOLD_SECONDS = 0  # every wait that does not end at once parks the node
    settings.WORKFLOW_RECHECK_MAX_SECONDS = 0.01
    bmc.tamper("BMC")
    bmc.task_polls = 2
    assert inspect(node, bmc) == "waiting at finish_firmware_update"
    hold = timedelta(seconds=settings.WORKFLOW_RECHECK_MAX_SECONDS)
    lease_runs_out(node, after=hold)  # the hold expires: the reconciler would send the node again
    assert inspect(node, bmc) == "waiting at finish_firmware_update"
    lease_runs_out(node, after=hold)
    assert inspect(node, bmc) == "paused at attest"
    assert [line for line in bmc.log if line.startswith("flash")] == [
        f"flash GF-BMC-1.4.2.bin onto {INVENTORY}/node-001-BMC"
    ]
    assert checked_facts(node)["repaired"] == ["BMC"]
