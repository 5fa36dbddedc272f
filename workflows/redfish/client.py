"""The calls the workflows make on a node's BMC (power, boot, virtual media, drives, logs,
firmware, BIOS settings, Secure Boot, the GPUs' SPDM evidence) and on the fabric's switch manager,
and `read_each`, which reads many of them at once."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar
from urllib.parse import urlsplit

from workflows.redfish import component_integrity
from workflows.redfish.errors import BMCPermanentError, RedfishError
from workflows.redfish.transport import RedfishTransport, action_target, is_inline, link, task_outcome

OPTICAL = frozenset({"CD", "DVD"})
REMOVABLE = frozenset({"USBStick", "Floppy"})
RESET_ON = "On"
RESET_FORCE_OFF = "ForceOff"
RESET_FORCE_RESTART = "ForceRestart"
RESET_GRACEFUL_RESTART = "GracefulRestart"
RESET_POWER_CYCLE = "PowerCycle"
CLEAR_LOG = "LogService.ClearLog"
UPDATE_SERVICE = "/redfish/v1/UpdateService"


T = TypeVar("T")
R = TypeVar("R")


def read_each(items: Iterable[T], read: Callable[[T], R], *, at_once: int) -> Iterator[tuple[T, R | RedfishError]]:
    """`read(item)` for every item, `at_once` at a time in threads, each item with its result or its
    RedfishError as soon as it is done. The reads must not touch the database; the caller acts on
    each result in its own thread while the others are read."""
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        reading = {pool.submit(read, item): item for item in items}
        for done in as_completed(reading):
            try:
                yield reading[done], done.result()
            except RedfishError as error:
                yield reading[done], error


def _attributes(bios: dict) -> dict:
    found = bios.get("Attributes")
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class LogEntries:
    """A page of a LogService's entries, oldest first as Redfish lists them."""

    members: list[dict]  # LogEntry objects, each with a string Id
    count: int  # Members@odata.count: the entries of the whole log, not of this page
    etag: str  # the log's ETag ("" if the BMC sends none): unchanged, a conditional GET answers 304


def _created_since(entry: object, since: datetime) -> bool:
    """A LogEntry whose Created is a date with its offset, at or after `since`."""
    created = entry.get("Created") if isinstance(entry, dict) else None
    try:
        at = datetime.fromisoformat(created) if isinstance(created, str) else None
    except ValueError:
        return False
    return at is not None and at.tzinfo is not None and at >= since


def _is_log_entry(value: object) -> bool:
    """A LogEntry a reader can keep a cursor on: an Id of at most 128 characters, a Created of at most 64."""
    if not isinstance(value, dict):
        return False
    entry_id, created = value.get("Id"), value.get("Created", "")
    return isinstance(entry_id, str) and 0 < len(entry_id) <= 128 and isinstance(created, str) and len(created) <= 64


class RedfishClient(RedfishTransport):
    """A node's BMC, or the fabric's switch manager, as the workflows use them."""

    @property
    def system_path(self) -> str:
        return f"/redfish/v1/Systems/{self.access.system_id}"

    # -- the calls the workflows make ------------------------------------------------------

    def members(self, collection: str) -> list[str]:
        """The paths of a collection's members."""
        members = self.get(collection).get("Members")
        if not isinstance(members, list):
            raise BMCPermanentError(self.access.node, f"GET {collection}", "answer is not a collection")
        return [path for path in map(link, members) if path]

    def fabric_switches(self) -> list[str]:
        """The paths of the switches of every fabric the service manages (Redfish Fabrics)."""
        fabrics = self.read_members("/redfish/v1/Fabrics")
        collections = [link(fabric.get("Switches")) or f"{path}/Switches" for path, fabric in fabrics]
        return [switch for collection in collections for switch in self.members(collection)]

    def switch_with_ports(self, path: str) -> tuple[dict, list[dict]]:
        """A fabric's switch and each of its ports (Redfish Switch and Port)."""
        switch = self.get(path)
        ports = link(switch.get("Ports")) or f"{path}/Ports"
        return switch, [port for _, port in self.read_members(ports)]

    def system(self) -> dict:
        return self.get(self.system_path)

    def power_state(self) -> str:
        return str(self.system().get("PowerState", ""))

    def last_reset_time(self) -> str | None:
        """When the BMC last reset the system (Redfish's LastResetTime), if it says."""
        found = self.system().get("LastResetTime")
        return found if isinstance(found, str) else None

    def _console_service(self) -> tuple[str, dict] | None:
        """The system's console log, its LogService named Console, as (path, service); None if the
        BMC keeps none."""
        services = link(self._system_as_first_read.get("LogServices"))
        members = (self.get_expanded(services).get("Members") or []) if services else []
        console = next((m for m in members if (link(m) or "").rstrip("/").endswith("/Console")), None)
        return (console["@odata.id"], self.resolve(console)) if console else None

    def console_log(self, lines: int, *, since: datetime) -> list[str] | None:
        """The last `lines` lines of the system's console log that the BMC dated at or after `since`
        (when the tenancy began): an earlier tenant's boot is never among them, nor a line whose
        date cannot be read. None if the BMC keeps no console log."""
        found = self._console_service()
        if found is None:
            return None
        path, service = found
        entries = self.get(link(service.get("Entries")) or f"{path}/Entries").get("Members") or []
        messages = [str(e.get("Message", "")) for e in entries if _created_since(e, since)]
        return messages[-lines:]

    def clear_console_log(self) -> bool:
        """Clear the console log (Redfish LogService.ClearLog) where the BMC offers that action;
        False where it keeps no console log or cannot clear it."""
        found = self._console_service()
        actions = found[1].get("Actions") if found else None
        target = action_target(actions.get(f"#{CLEAR_LOG}") if isinstance(actions, dict) else None)
        if target is None:
            return False
        self.request("POST", target, json={}, call=f"{CLEAR_LOG} of the console")
        return True

    def event_log_entries_path(self) -> str | None:
        """The Entries of the node's system event log: the LogService whose LogEntryType is SEL,
        the System's (bmcsim's, OpenBMC's) or else a Manager's (iDRAC's); None if there is none."""
        holders = itertools.chain([self._system_as_first_read], (self.get(m) for m in self.managers()))
        for holder in holders:
            services = link(holder.get("LogServices"))
            for service_path, service in self.read_members(services) if services else ():
                if service.get("LogEntryType") == "SEL":
                    return link(service.get("Entries")) or f"{service_path}/Entries"
        return None

    def log_entries(self, path: str, *, skip: int, top: int, etag: str = "") -> LogEntries | None:
        """Entries `skip` to `skip + top` of a log (Redfish's $skip and $top), or None if the log has
        not changed since `etag` (the BMC answered 304 to If-None-Match)."""
        call = f"GET {path} $skip={skip} $top={top}"
        response = self.request(
            "GET", f"{path}?$skip={skip}&$top={top}", headers={"If-None-Match": etag} if etag else None, call=call
        )
        if response.status_code == 304:
            return None
        body = self._object(response, call)
        members, count = body.get("Members"), body.get("Members@odata.count")
        if not isinstance(members, list) or not all(_is_log_entry(m) for m in members) or not isinstance(count, int):
            raise BMCPermanentError(self.access.node, call, "answer is not a collection of LogEntry with Ids")
        return LogEntries(members, count, response.headers.get("ETag") or str(body.get("@odata.etag", "")))

    def reset(self, reset_type: str) -> None:
        self.request(
            "POST",
            f"{self.system_path}/Actions/ComputerSystem.Reset",
            json={"ResetType": reset_type},
            call=f"ComputerSystem.Reset {reset_type}",
        )

    def set_boot_override(self, target: str, enabled: str = "Once") -> None:
        boot = {"BootSourceOverrideTarget": target, "BootSourceOverrideEnabled": enabled}
        self.request("PATCH", self.system_path, json={"Boot": boot}, call=f"set boot {target} {enabled}")

    @functools.cached_property
    def _media_collections(self) -> list[str]:
        """The VirtualMedia collection of each of the System's Managers."""
        return [link(self.get(manager).get("VirtualMedia")) or f"{manager}/VirtualMedia" for manager in self.managers()]

    @functools.cached_property
    def _media_devices(self) -> list[tuple[str, frozenset[str]]]:
        """Each virtual media device with the media it takes: what devices there are does not change."""
        return [
            (path, frozenset(media.get("MediaTypes", [])))
            for collection in self._media_collections
            for path, media in self.read_members(collection)
        ]

    def virtual_media(self) -> list[str]:
        """URIs of the node's virtual media devices, those that take CDs or DVDs first. Found once
        per client: a BMC's resource tree does not change under a workflow."""
        optical = [uri for uri, types in self._media_devices if types & OPTICAL]
        return optical + [uri for uri, types in self._media_devices if not types & OPTICAL]

    def insert_media(self, image_url: str, *, removable: bool = False) -> str:
        """Insert an image: in a CD/DVD device (what the node boots), or with `removable` in a
        USB stick or floppy device beside it (a config drive)."""
        if removable:
            devices = [uri for uri, types in self._media_devices if types & REMOVABLE and not types & OPTICAL]
        else:
            devices = self.virtual_media()
        if not devices:
            what = "no USB stick or floppy virtual media beside the CD" if removable else "no virtual media"
            raise BMCPermanentError(self.access.node, "InsertMedia", f"the BMC offers {what}")
        device = devices[0]
        self.request(
            "POST",
            f"{device}/Actions/VirtualMedia.InsertMedia",
            json={"Image": image_url, "Inserted": True, "WriteProtected": True},
            # A config drive's URL is its only credential: kept out of errors and logs.
            call="InsertMedia (config drive)" if removable else f"InsertMedia {image_url}",
        )
        return device

    @functools.cached_property
    def _drives(self) -> list[str]:
        storage_path = self._linked("Storage")
        drives: list[str] = []
        for _, storage in self.read_members(storage_path):
            drives.extend(filter(None, map(link, storage.get("Drives", []))))
        return drives

    def drives(self) -> list[str]:
        """URIs of every drive of the system, found once per client."""
        return self._drives

    def secure_erase(self, drive: str) -> str | None:
        """Start a secure erase; the task monitor to poll, or None if the BMC finished at once."""
        response = self.request("POST", f"{drive}/Actions/Drive.SecureErase", json={}, call=f"SecureErase {drive}")
        return self.task_monitor(response, f"SecureErase {drive}")

    # -- firmware, BIOS settings, Secure Boot ------------------------------------------------

    @functools.cached_property
    def _system_as_first_read(self) -> dict:
        """The System once per client: where its Bios, SecureBoot and Managers are does not change."""
        return self.system()

    def _linked(self, name: str) -> str:
        return self._system_as_first_read.get(name, {}).get("@odata.id") or f"{self.system_path}/{name}"

    def managers(self) -> list[str]:
        """The Managers (BMCs) of the node's System."""
        managed_by = self._system_as_first_read.get("Links", {}).get("ManagedBy", [])
        return [m["@odata.id"] for m in managed_by if isinstance(m, dict) and "@odata.id" in m]

    def firmware_inventory(self) -> list[dict]:
        """Every member of the UpdateService's FirmwareInventory (Redfish SoftwareInventory): all
        this credential sees, which fleet.firmware.installed_components sorts by node. One GET
        where the BMC expands two levels (the service, its inventory and the inventory's members)."""
        service = self.get_expanded(UPDATE_SERVICE, levels=2)
        inventory = service.get("FirmwareInventory")
        if isinstance(inventory, dict) and is_inline(inventory) and isinstance(inventory.get("Members"), list):
            return [self.resolve(member) for member in inventory["Members"] if link(member)]
        collection = link(inventory) or f"{UPDATE_SERVICE}/FirmwareInventory"
        return [item for _, item in self.read_members(collection)]

    def simple_update(self, image_uri: str, target: str) -> str | None:
        """Flash `image_uri` onto `target` (an inventory item, or the System for its BIOS); the task
        monitor to poll, or None if the BMC finished at once."""
        response = self.request(
            "POST",
            f"{UPDATE_SERVICE}/Actions/UpdateService.SimpleUpdate",
            json={"ImageURI": image_uri, "TransferProtocol": urlsplit(image_uri).scheme.upper(), "Targets": [target]},
            call=f"SimpleUpdate {image_uri} onto {target}",
        )
        return self.task_monitor(response, f"SimpleUpdate {image_uri}")

    def bios_attributes(self) -> dict:
        return _attributes(self.get(self._linked("Bios")))

    def bios_and_secure_boot(self) -> tuple[dict, dict]:
        """The BIOS attributes and the SecureBoot resource, both read now: from one GET of the
        System where the BMC expands, else one of each."""
        if self.expand_levels < 1:
            return self.bios_attributes(), self.secure_boot()
        system = self.get_expanded(self.system_path)
        bios, secure_boot = (system.get(name) or {"@odata.id": self._linked(name)} for name in ("Bios", "SecureBoot"))
        return _attributes(self.resolve(bios)), self.resolve(secure_boot)

    def set_bios_settings(self, attributes: dict) -> None:
        """Ask for BIOS attributes at the next boot, through the Bios resource's settings object."""
        bios = self._linked("Bios")
        settings = self.get(bios).get("@Redfish.Settings", {}).get("SettingsObject", {}).get("@odata.id")
        self.request("PATCH", settings or f"{bios}/Settings", json={"Attributes": attributes}, call="BIOS settings")

    def secure_boot(self) -> dict:
        return self.get(self._linked("SecureBoot"))

    def enable_secure_boot(self) -> None:
        """Secure Boot on from the next boot."""
        self.request("PATCH", self._linked("SecureBoot"), json={"SecureBootEnable": True}, call="enable Secure Boot")

    def task_status(self, monitor: str) -> tuple[bool, str]:
        """(done, outcome) of a task: outcome is its TaskState, then its messages if it failed."""
        response = self.request("GET", monitor, call=f"task {monitor}")
        if response.status_code == 202:
            return False, "Running"
        try:
            task = response.json()
        except ValueError:
            return True, "Completed"  # a monitor may answer the finished operation's own result
        return task_outcome(task)

    # -- the GPUs' SPDM evidence, out of band ------------------------------------------------

    def gpu_spdm_evidence(self, nonce: bytes) -> list[dict]:
        """Each GPU's SPDM evidence through the BMC (Redfish ComponentIntegrity): for every enabled
        SPDM member whose target is a Processor of this system, its signed measurements of every
        block over `nonce`, its responder's certificate chain and the Processor's UUID, as
        {"uuid", "processor", "source": "out_of_band", "report" (SignedMeasurements, base64, as
        served), "cert_chain" (PEM)}. A GPU whose fetch fails is {"uuid" (if read), "processor",
        "status": "unavailable", "reason"} and the others go on. [] if the service has no
        ComponentIntegrity; a BMC that fails to list it or its members raises, as other calls do."""
        return component_integrity.gpu_spdm_evidence(self, self.system_path, nonce)
