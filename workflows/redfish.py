"""A Redfish client for one node's BMC, on requests; also for the fabric's switch manager
(workflows/fabric_health.py), with that service's URL and credentials in place of a node's.

Why not OpenStack's sushy: the workflows need a handful of calls (power, one-time boot,
virtual media, drive secure erase and firmware updates with task polling, BIOS settings, Secure
Boot, the system event log) with our own retry policy and errors
that name the node and the call; sushy brings a resource model and its own retry and error
handling for all of Redfish. The tests drive this client against OpenStack's sushy-tools
emulator as well as bmcsim, so it speaks Redfish as others do.

Transient errors (connection errors, timeouts, 5xx, 503 with Retry-After) are retried, by
tenacity, with exponential backoff and full jitter or as long as the BMC's Retry-After asks;
permanent ones (4xx) fail at once. Every call has a timeout. No call is ever made inside a
database transaction: the workflows call this outside.

The BMC's credentials go to the BMC and nowhere else. Its URL must pass the BMC-network
allow-list (fleet/bmc_access.py), and a URL the BMC hands back (an `@odata.id`, a task
monitor's `Location`) is followed only on the base URL's own scheme, host and port; redirects
are not followed at all. Anything else is a permanent error naming the node.
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urljoin, urlsplit

import requests
import tenacity

from core.parsing import InvalidInput, parse_int
from fleet.bmc_access import BMCAddressRefused, bmc_host, check_bmc_url

OPTICAL = frozenset({"CD", "DVD"})
REMOVABLE = frozenset({"USBStick", "Floppy"})
RESET_ON = "On"
RESET_FORCE_OFF = "ForceOff"
RESET_FORCE_RESTART = "ForceRestart"
RESET_GRACEFUL_RESTART = "GracefulRestart"
RESET_POWER_CYCLE = "PowerCycle"


T = TypeVar("T")
R = TypeVar("R")


class RedfishError(Exception):
    def __init__(self, node: str, call: str, message: str):
        super().__init__(f"{node}: {call}: {message}")
        self.node = node
        self.call = call


class BMCTransientError(RedfishError):
    """The BMC did not answer usefully now; the same call may succeed later."""

    def __init__(self, node: str, call: str, message: str, retry_after: str | None = None):
        super().__init__(node, call, message)
        self.retry_after = retry_after  # the BMC's Retry-After header, read when waiting to retry


class BMCPermanentError(RedfishError):
    """The BMC refused the call; repeating it will not help."""


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


@dataclass(frozen=True)
class LogEntries:
    """A page of a LogService's entries, oldest first as Redfish lists them."""

    members: list[dict]  # LogEntry objects, each with a string Id
    count: int  # Members@odata.count: the entries of the whole log, not of this page
    etag: str  # the log's ETag ("" if the BMC sends none): unchanged, a conditional GET answers 304


@dataclass(frozen=True)
class BMCAccess:
    node: str
    base_url: str
    system_id: str
    username: str
    password: str


def _origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) a URL reaches; BMCAddressRefused if it is not plain http(s) to a host."""
    return (urlsplit(url).scheme, *bmc_host(url))


def _retry_after_seconds(value: str | None, now: float) -> float | None:
    """What a Retry-After header asks for, in seconds from `now` (RFC 9110 section 10.2.3: a
    number of seconds, or an HTTP-date); None when there is none or it cannot be read."""
    if not value:
        return None
    try:
        return float(parse_int(value))
    except InvalidInput:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": the date is in UTC, its source's zone unknown
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def _link(value: object) -> str | None:
    """The `@odata.id` of a link ({"@odata.id": ...}), or None if `value` is no link."""
    found = value.get("@odata.id") if isinstance(value, dict) else None
    return found if isinstance(found, str) and found else None


def _is_log_entry(value: object) -> bool:
    """A LogEntry a reader can keep a cursor on: an Id of at most 128 characters, a Created of at most 64."""
    if not isinstance(value, dict):
        return False
    entry_id, created = value.get("Id"), value.get("Created", "")
    return isinstance(entry_id, str) and 0 < len(entry_id) <= 128 and isinstance(created, str) and len(created) <= 64


def _redfish_message(response: requests.Response) -> str:
    try:
        error = response.json()["error"]
        extended = error.get("@Message.ExtendedInfo") or [{}]
        return f"{response.status_code} {error.get('message', '')} {extended[0].get('Message', '')}".strip()
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return f"{response.status_code} {response.text[:200]!r}"


class RedfishClient:
    def __init__(
        self,
        access: BMCAccess,
        *,
        timeout: float = 10.0,
        attempts: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.access = access
        self.timeout = timeout
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.session = requests.Session()
        self.session.auth = (access.username, access.password)
        self.session.headers.update({"Accept": "application/json", "OData-Version": "4.0"})
        self.calls = 0  # HTTP requests made, retries included
        self.seconds = 0.0  # time spent waiting on them
        # Checked once, here. A refusal is raised by the first call, inside a workflow step,
        # where it fails the workflow as a permanent error instead of crashing the worker.
        try:
            check_bmc_url(access.base_url)
            self._bmc_origin, self._refused = _origin(access.base_url), None
        except BMCAddressRefused as refusal:
            # The URL without any user:password in it: the refusal is logged and audited.
            parts = urlsplit(access.base_url)
            shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
            self._bmc_origin, self._refused = None, f"{shown}: {refusal}"

    @property
    def system_path(self) -> str:
        return f"/redfish/v1/Systems/{self.access.system_id}"

    def close(self) -> None:
        self.session.close()

    # -- transport -------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: dict | None = None,
        headers: dict[str, str] | None = None,
        call: str | None = None,
    ) -> requests.Response:
        call = call or f"{method} {path}"
        if self._refused:
            raise BMCPermanentError(self.access.node, call, self._refused)
        url = urljoin(self.access.base_url.rstrip("/") + "/", path.lstrip("/"))
        self._check_on_this_bmc(url, call)
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(BMCTransientError),  # a permanent error is raised at once
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=self._wait,
            sleep=self.sleep,
            reraise=True,  # the last BMCTransientError itself, not tenacity's RetryError
        )
        return retrying(self._attempt, method, url, json, headers, call)

    def _attempt(
        self, method: str, url: str, json: dict | None, headers: dict[str, str] | None, call: str
    ) -> requests.Response:
        """One HTTP request; BMCTransientError if it is worth repeating, BMCPermanentError if not."""
        self.calls += 1
        began = time.perf_counter()
        try:
            response = self.session.request(
                method, url, json=json, headers=headers, timeout=self.timeout, allow_redirects=False
            )
        except (requests.ConnectionError, requests.Timeout) as error:
            # Not chained: requests' error carries the request, Authorization header and all.
            raise BMCTransientError(self.access.node, call, f"{type(error).__name__}: {error}") from None
        finally:
            self.seconds += time.perf_counter() - began
        # 304 Not Modified is no redirect: the answer to a conditional GET (If-None-Match).
        if 300 <= response.status_code < 400 and response.status_code != 304:
            where = response.headers.get("Location", "nowhere")
            raise BMCPermanentError(
                self.access.node,
                call,
                f"{response.status_code} redirect to {where!r}: redirects are not followed",
            )
        if response.status_code < 400:
            return response
        if response.status_code < 500:
            raise BMCPermanentError(self.access.node, call, _redfish_message(response))
        raise BMCTransientError(
            self.access.node, call, _redfish_message(response), retry_after=response.headers.get("Retry-After")
        )

    def _check_on_this_bmc(self, url: str, call: str) -> None:
        try:
            on_this_bmc = _origin(url) == self._bmc_origin
        except BMCAddressRefused:
            on_this_bmc = False
        if not on_this_bmc:
            raise BMCPermanentError(
                self.access.node,
                call,
                f"refusing {url[:200]!r}: not on this BMC ({self.access.base_url}), the only place its credentials go",
            )

    def _wait(self, retry_state: tenacity.RetryCallState) -> float:
        """The BMC's Retry-After when it sent one we can read (capped at max_backoff), else
        exponential backoff with full jitter: uniform(0, min(max_backoff, backoff * 2**(n-1)))."""
        failure = retry_state.outcome.exception()
        asked = _retry_after_seconds(getattr(failure, "retry_after", None), time.time())
        if asked is not None:
            return min(asked, self.max_backoff)
        return tenacity.wait_random_exponential(multiplier=self.backoff, max=self.max_backoff)(retry_state)

    def get(self, path: str) -> dict:
        return self._object(self.request("GET", path), f"GET {path}")

    def _object(self, response: requests.Response, call: str) -> dict:
        try:
            body = response.json()
        except ValueError as error:
            raise BMCTransientError(self.access.node, call, "answer is not JSON") from error
        if not isinstance(body, dict):
            raise BMCTransientError(self.access.node, call, "answer is not a JSON object")
        return body

    # -- the calls the workflows make ------------------------------------------------------

    def members(self, collection: str) -> list[str]:
        """The paths of a collection's members."""
        members = self.get(collection).get("Members")
        if not isinstance(members, list):
            raise BMCPermanentError(self.access.node, f"GET {collection}", "answer is not a collection")
        return [path for path in map(_link, members) if path]

    def fabric_switches(self) -> list[str]:
        """The paths of the switches of every fabric the service manages (Redfish Fabrics)."""
        fabrics = self.members("/redfish/v1/Fabrics")
        collections = [_link(self.get(fabric).get("Switches")) or f"{fabric}/Switches" for fabric in fabrics]
        return [switch for collection in collections for switch in self.members(collection)]

    def switch_with_ports(self, path: str) -> tuple[dict, list[dict]]:
        """A fabric's switch and each of its ports (Redfish Switch and Port)."""
        switch = self.get(path)
        ports = _link(switch.get("Ports")) or f"{path}/Ports"
        return switch, [self.get(port) for port in self.members(ports)]

    def system(self) -> dict:
        return self.get(self.system_path)

    def power_state(self) -> str:
        return str(self.system().get("PowerState", ""))

    def last_reset_time(self) -> str | None:
        """When the BMC last reset the system (Redfish's LastResetTime), if it says."""
        found = self.system().get("LastResetTime")
        return found if isinstance(found, str) else None

    def console_log(self, lines: int) -> list[str] | None:
        """The last `lines` lines of the system's console log (its LogService named Console), or
        None if the BMC keeps none."""
        services = self.system().get("LogServices", {}).get("@odata.id")
        if not services:
            return None
        console = next(
            (
                m["@odata.id"]
                for m in self.get(services).get("Members", [])
                if m["@odata.id"].rstrip("/").endswith("/Console")
            ),
            None,
        )
        if console is None:
            return None
        entries = self.get(self.get(console).get("Entries", {}).get("@odata.id", f"{console}/Entries"))
        messages = [str(e.get("Message", "")) for e in entries.get("Members", []) if isinstance(e, dict)]
        return messages[-lines:]

    def event_log_entries_path(self) -> str | None:
        """The Entries of the node's system event log: the LogService whose LogEntryType is SEL,
        the System's (bmcsim's, OpenBMC's) or else a Manager's (iDRAC's); None if there is none."""
        holders = itertools.chain([self._system_as_first_read], (self.get(m) for m in self.managers()))
        for holder in holders:
            services = _link(holder.get("LogServices"))
            members = (self.get(services).get("Members") or []) if services else []
            for service_path in filter(None, map(_link, members)):
                service = self.get(service_path)
                if service.get("LogEntryType") == "SEL":
                    return _link(service.get("Entries")) or f"{service_path}/Entries"
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

    def clear_boot_override(self) -> None:
        self.request(
            "PATCH",
            self.system_path,
            json={"Boot": {"BootSourceOverrideEnabled": "Disabled"}},
            call="clear boot override",
        )

    @functools.cached_property
    def _media_devices(self) -> list[tuple[str, frozenset[str]]]:
        manager_paths = [m["@odata.id"] for m in self.system().get("Links", {}).get("ManagedBy", [])]
        devices = []
        for manager in manager_paths:
            collection = self.get(self.get(manager).get("VirtualMedia", {}).get("@odata.id", f"{manager}/VirtualMedia"))
            for member in collection.get("Members", []):
                media = self.get(member["@odata.id"])
                devices.append((member["@odata.id"], frozenset(media.get("MediaTypes", []))))
        return devices

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

    def eject_media(self) -> None:
        for device in self.virtual_media():
            if self.get(device).get("Inserted"):
                self.request("POST", f"{device}/Actions/VirtualMedia.EjectMedia", json={}, call="EjectMedia")

    @functools.cached_property
    def _drives(self) -> list[str]:
        storage_path = self.system().get("Storage", {}).get("@odata.id", f"{self.system_path}/Storage")
        drives = []
        for member in self.get(storage_path).get("Members", []):
            drives.extend(d["@odata.id"] for d in self.get(member["@odata.id"]).get("Drives", []))
        return drives

    def drives(self) -> list[str]:
        """URIs of every drive of the system, found once per client."""
        return self._drives

    def secure_erase(self, drive: str) -> str | None:
        """Start a secure erase; the task monitor to poll, or None if the BMC finished at once."""
        response = self.request("POST", f"{drive}/Actions/Drive.SecureErase", json={}, call=f"SecureErase {drive}")
        return self._task_monitor(response, f"SecureErase {drive}")

    def _task_monitor(self, response: requests.Response, call: str) -> str | None:
        """The task monitor of an action the BMC accepted (202), or None if it finished at once."""
        if response.status_code != 202:
            return None
        monitor = response.headers.get("Location")
        if not monitor:
            raise BMCPermanentError(self.access.node, call, "202 without a task monitor")
        return monitor

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
        this credential sees, which fleet.firmware.installed_components sorts by node."""
        service = self.get("/redfish/v1/UpdateService")
        collection = service.get("FirmwareInventory", {}).get(
            "@odata.id", "/redfish/v1/UpdateService/FirmwareInventory"
        )
        return [self.get(member["@odata.id"]) for member in self.get(collection).get("Members", [])]

    def simple_update(self, image_uri: str, target: str) -> str | None:
        """Flash `image_uri` onto `target` (an inventory item, or the System for its BIOS); the task
        monitor to poll, or None if the BMC finished at once."""
        response = self.request(
            "POST",
            "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
            json={"ImageURI": image_uri, "TransferProtocol": urlsplit(image_uri).scheme.upper(), "Targets": [target]},
            call=f"SimpleUpdate {image_uri} onto {target}",
        )
        return self._task_monitor(response, f"SimpleUpdate {image_uri}")

    def bios_attributes(self) -> dict:
        found = self.get(self._linked("Bios")).get("Attributes")
        return found if isinstance(found, dict) else {}

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
        state = task.get("TaskState", "Completed")
        if state in ("New", "Starting", "Running", "Pending", "Stopping", "Suspended", "Service"):
            return False, state
        messages = "; ".join(m.get("Message", "") for m in task.get("Messages", []) if isinstance(m, dict))
        return True, f"{state}{': ' + messages if messages and state != 'Completed' else ''}"
