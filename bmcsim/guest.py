"""The OS a node runs and what its serial console shows: firmware, kernel, cloud-init, login prompt.

A node that boots a fetched image from its virtual CD runs the tenant OS, which cloud-init
configures from a NoCloud config drive among the inserted media: the host name (meta-data's
local-hostname), the authorized keys (meta-data's public-keys and a cloud-config's
ssh_authorized_keys), the address (network-config v2, the first address of the first
ethernet that has one, other than `private0`) and the private address (the first of the ethernet
`private0`: the node's address on its tenant's Ethernet segment, which reachability.py routes);
its sshd (bmcsim/sshd.py) listens on the address if it is a loopback one.
Whatever else a node boots (its disk, PXE, a CD whose image the BMC could not fetch, such as the
control plane's service image) runs the node agent only. Either way the agent takes the credentials
of that boot from the config drive's gpu-agent.json, if one is inserted, as a real node's does.

Console scripts are (offset in simulated seconds from the reset, text); a Timeline dates them.
"""

from __future__ import annotations

import datetime
import email.utils
import ipaddress
import json
from dataclasses import dataclass

import asyncssh
import yaml

from . import images

CLOUD_INIT = "Cloud-init v. 24.4-0ubuntu1~24.04.2"
UNKNOWN_KERNEL = "6.8.0-gpufleet"  # a fetched image that is not one of bmcsim's samples
HOST_KEY_TYPE = "ssh-ed25519"
PRIVATE_ETHERNET = "private0"  # network-config's ethernet on the tenant's private segment
CD_BOOT_OPTION = 'Boot0003 "UEFI bmcsim Virtual CD"'
BOOT_OPTIONS = {
    "Hdd": 'Boot0001 "NVMe drive 0"',
    "Pxe": 'Boot0004 "UEFI PXEv4 (MAC of NIC0)"',
    "UefiHttp": 'Boot0005 "UEFI HTTPv4 (MAC of NIC0)"',
    "Usb": 'Boot0006 "UEFI bmcsim Virtual USB"',
    "BiosSetup": "the firmware's setup menu",
}


@dataclass(frozen=True)
class Timeline:
    """When a transition started, the time scale, and when the OS starts and is up (simulated seconds)."""

    start: float
    scale: float
    os_start_s: float
    os_up_s: float

    def dated(self, script: list[tuple[float, str]]) -> list[tuple[float, str]]:
        return [(self.start + offset * self.scale, text) for offset, text in sorted(script, key=lambda s: s[0])]

    def in_os(self, fraction: float) -> float:
        """The offset `fraction` of the way through the OS's boot."""
        return self.os_start_s + fraction * (self.os_up_s - self.os_start_s)

    def wall(self, offset: float) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.start + offset * self.scale, datetime.UTC)


# -- the tenant OS --------------------------------------------------------------------------------


def new_host_key() -> str:
    """A node's SSH host key, made per instance as cloud-init does and kept with its state (OpenSSH format)."""
    return asyncssh.generate_private_key(HOST_KEY_TYPE).export_private_key().decode()


def is_loopback(address: str | None) -> bool:
    """Whether a node's address is on this host (127.0.0.0/8 or ::1), so that its sshd can listen on it."""
    return address is not None and ipaddress.ip_address(address).is_loopback


def config_drive(media: dict) -> dict[str, str] | None:
    """cloud-init's NoCloud source: the documents of the first inserted medium labelled CIDATA."""
    return next((slot["documents"] for slot in media.values() if slot.get("inserted") and "documents" in slot), None)


def agent_credentials(documents: dict[str, str] | None) -> dict[str, str] | None:
    """What the node agent reads at boot from the config drive's gpu-agent.json, as gpu-agent's
    --credentials-file does: {"agent_token", "report_token"}; None without a drive or a usable one
    (the agent then answers 401 to everything and reports nothing)."""
    try:
        loaded = json.loads((documents or {}).get("gpu-agent.json") or "null")
    except ValueError:
        return None
    if not isinstance(loaded, dict):
        return None
    tokens = {key: token for key in ("agent_token", "report_token") if isinstance(token := loaded.get(key), str)}
    return tokens if len(tokens) == 2 and all(tokens.values()) else None


def tenant_os(cd: dict, documents: dict[str, str] | None, host_key: str) -> tuple[dict, list[str]]:
    """The tenant OS booted from the CD's fetched image, as cloud-init configures it; and cloud-init's warnings."""
    warnings: list[str] = []
    meta_data = _yaml_mapping(documents, "meta-data", warnings)
    user_data = (documents or {}).get("user-data", "")
    cloud_config = _yaml_mapping(documents, "user-data", warnings) if user_data.startswith("#cloud-config") else {}
    keys = _authorized_keys(meta_data.get("public-keys"), warnings)
    keys += [key for key in _authorized_keys(cloud_config.get("ssh_authorized_keys"), warnings) if key not in keys]
    network = _yaml_mapping(documents, "network-config", warnings)
    key = asyncssh.import_private_key(host_key)
    return {
        "image": cd["image"],
        "image_sha256": cd["sha256"],
        "datasource": documents is not None,
        "instance_id": str(meta_data.get("instance-id", "")),
        "hostname": str(meta_data.get("local-hostname") or "localhost"),
        "authorized_keys": keys,
        "address": _address(network, warnings, private=False),
        "private_address": _address(network, warnings, private=True),
        "host_key_type": HOST_KEY_TYPE,
        "host_key_fingerprint": key.get_fingerprint("sha256"),
        "host_public_key": key.export_public_key().decode().strip(),
    }, warnings


def _yaml_mapping(documents: dict[str, str] | None, name: str, warnings: list[str]) -> dict:
    text = (documents or {}).get(name)
    if not text:
        return {}
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        warnings.append(f"{name} is not valid YAML: {str(error).splitlines()[0]}")
        return {}
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        warnings.append(f"{name} is not a mapping; ignored")
        return {}
    return loaded


def _authorized_keys(value: object, warnings: list[str]) -> list[str]:
    """Keys as cloud-init takes them (a list, a string of lines, or a mapping of names to keys), bad ones dropped."""
    if isinstance(value, str):
        candidates = value.splitlines()
    elif isinstance(value, dict):
        candidates = list(value.values())
    elif isinstance(value, list):
        candidates = value
    else:
        return []
    keys = []
    for candidate in candidates:
        line = str(candidate).strip()
        if not line or line.startswith("#"):
            continue
        try:
            asyncssh.import_authorized_keys(line)
        except ValueError:
            warnings.append(f"skipped an invalid SSH public key: {line[:40]}")
            continue
        if line not in keys:
            keys.append(line)
    return keys


def _address(network: dict, warnings: list[str], private: bool) -> str | None:
    """The first static address of network-config version 2, without its prefix length: of the
    ethernet PRIVATE_ETHERNET if `private`, else of the first other ethernet that has one."""
    network = network.get("network", network)  # cloud-init accepts the document wrapped in "network:"
    ethernets = network.get("ethernets") if isinstance(network, dict) else None
    if not isinstance(ethernets, dict):
        return None
    for name, ethernet in ethernets.items():
        if (name == PRIVATE_ETHERNET) != private:
            continue
        addresses = ethernet.get("addresses") if isinstance(ethernet, dict) else None
        if isinstance(addresses, list) and addresses:
            try:
                return str(ipaddress.ip_interface(str(addresses[0])).ip)
            except ValueError:
                warnings.append(f"network-config: {addresses[0]!r} is not an address")
                return None
    return None


# -- console scripts -------------------------------------------------------------------------------

RESET_LINES = {
    "On": "power on",
    "ForceOn": "power on",
    "ForceOff": "power off",
    "GracefulShutdown": "ACPI power button pressed",
    "GracefulRestart": "ACPI reboot request",
    "ForceRestart": "reset",
    "PowerCycle": "power cycle",
    "Nmi": "NMI",
}


def reset_script(reset_type: str, os_running: bool, power_off_s: float) -> list[tuple[float, str]]:
    """What the console shows of a reset itself: the BMC's line, and the running OS's last words."""
    script = [(0.0, f"bmcsim: {RESET_LINES[reset_type]} ({reset_type})")]
    if reset_type == "GracefulShutdown":
        if os_running:
            script.append((power_off_s / 2, "[  OK  ] Reached target poweroff.target - System Power Off."))
        script.append((power_off_s, "reboot: Power down"))
    elif reset_type == "GracefulRestart" and os_running:
        script.append((0.0, "reboot: Restarting system"))
    elif reset_type == "Nmi" and os_running:
        script.append((0.0, "Uhhuh. NMI received for unknown reason 3d on CPU 0."))
    return script


def boot_script(
    node: str, firmware: str, source: str, cd: dict | None, guest: dict | None, warnings: list[str], timeline: Timeline
) -> list[tuple[float, str]]:
    """The console from power-on to the login prompt."""
    sample = images.by_sha256(guest["image_sha256"]) if guest else None
    kernel = sample.kernel if sample else UNKNOWN_KERNEL
    start = timeline.os_start_s
    script = [
        (start * 0.2, f"{firmware} UEFI firmware, bmcsim node {node}"),
        *((start * 0.9, line) for line in _boot_device_lines(source, cd)),
        (start, f"[    0.000000] Linux version {kernel} (bmcsim simulated kernel)"),
        (start, f"[    0.000000] Command line: BOOT_IMAGE=/vmlinuz-{kernel} console=tty0 console=ttyS0,115200n8"),
        (timeline.in_os(0.15), f"{_uptime(timeline.in_os(0.15) - start)} systemd[1]: Detected architecture x86-64."),
    ]
    if guest is None:
        script += [
            (timeline.in_os(0.9), "[  OK  ] Started gpu-agent.service - gpu-fleet node agent."),
            (timeline.os_up_s, f"{node} login:"),
        ]
    else:
        script += _cloud_init_script(guest, warnings, timeline)
        script += [
            (timeline.os_up_s, f"{sample.pretty_name if sample else 'Linux'} {guest['hostname']} ttyS0"),
            (timeline.os_up_s, f"{guest['hostname']} login:"),
        ]
    return script


def _boot_device_lines(source: str, cd: dict | None) -> list[str]:
    if source != "Cd":
        return [f"BdsDxe: starting {BOOT_OPTIONS.get(source, source)}"]
    if cd is None or not cd.get("inserted"):
        reason = "no medium inserted"
    elif "error" in cd:
        reason = f"the BMC could not fetch {cd['image']}: {cd['error']}"
    else:
        return [f"BdsDxe: loading {CD_BOOT_OPTION} from {cd['image']}", f"BdsDxe: starting {CD_BOOT_OPTION}"]
    return [
        f"BdsDxe: failed to load {CD_BOOT_OPTION}: {reason}",
        "bmcsim: the node boots its service environment (the node agent) instead",
    ]


def _cloud_init_script(guest: dict, warnings: list[str], timeline: Timeline) -> list[tuple[float, str]]:
    init, final = timeline.in_os(0.4), timeline.in_os(0.85)
    host, address = guest["hostname"], guest["address"]
    script = [
        (
            init,
            f"{_uptime(init - timeline.os_start_s)} cloud-init[812]: {CLOUD_INIT} running 'init' at "
            f"{email.utils.format_datetime(timeline.wall(init))}. Up {init - timeline.os_start_s:.2f} seconds.",
        ),
    ]
    if not guest["datasource"]:
        script.append((init, "cloud-init: WARNING: no NoCloud datasource found (no medium labelled CIDATA)"))
    script += [(init, f"cloud-init: WARNING: {warning}") for warning in warnings]
    script.append((init, f"ci-info: | tenant0 | True | {address or '.'} | global |"))
    if guest["private_address"]:
        script.append((init, f"ci-info: | {PRIVATE_ETHERNET} | True | {guest['private_address']} | global |"))
    if guest["authorized_keys"]:
        script.append((final, "ci-info: Authorized keys from /root/.ssh/authorized_keys for user root"))
        script += [(final, f"ci-info: | {_key_row(key)} |") for key in guest["authorized_keys"]]
    else:
        script.append((final, "ci-info: no authorized SSH keys fingerprints found for user root."))
    stamp = f"<14>{_syslog_time(timeline.wall(final))} cloud-init:"
    script += [
        (final, f"{stamp} #############################################################"),
        (final, f"{stamp} -----BEGIN SSH HOST KEY FINGERPRINTS-----"),
        (final, f"{stamp} 256 {guest['host_key_fingerprint']} root@{host} (ED25519)"),
        (final, f"{stamp} -----END SSH HOST KEY FINGERPRINTS-----"),
        (final, f"{stamp} #############################################################"),
        (final, "-----BEGIN SSH HOST KEY KEYS-----"),
        (final, f"{guest['host_public_key']} root@{host}"),
        (final, "-----END SSH HOST KEY KEYS-----"),
        (final, _sshd_line(address)),
        (
            final,
            f"{_uptime(final - timeline.os_start_s)} cloud-init[990]: {CLOUD_INIT} finished at "
            f"{email.utils.format_datetime(timeline.wall(final))}. Datasource "
            f"{'DataSourceNoCloud [seed=/dev/sr1]' if guest['datasource'] else 'DataSourceNone'}. "
            f"Up {final - timeline.os_start_s:.2f} seconds",
        ),
    ]
    return script


def _sshd_line(address: str | None) -> str:
    if address is None:
        return "bmcsim: network-config gives no static address: the node's sshd does not listen"
    if not is_loopback(address):
        return f"bmcsim: {address} is not an address of this host: the node's sshd does not listen"
    return "[  OK  ] Started ssh.service - OpenBSD Secure Shell server."


def _key_row(line: str) -> str:
    """cloud-init's row for an authorized key: type, fingerprint, options, comment."""
    try:
        key = asyncssh.import_public_key(line)
    except ValueError:  # options before the key, which sshd honours and this table does not spell out
        return "- | - | (options) | -"
    return f"{key.algorithm.decode()} | {key.get_fingerprint('sha256')} | - | {key.get_comment() or '-'}"


def _uptime(seconds: float) -> str:
    return f"[{seconds:12.6f}]"


def _syslog_time(moment: datetime.datetime) -> str:
    return f"{moment:%b} {moment.day:2d} {moment:%H:%M:%S}"
