"""A node class's firmware and BIOS baseline, and how a node's firmware differs from it.

Pure: no Django. The baseline says, per component, the version and SHA-256 digest every node of
the class must run and the image that installs them, which BIOS attributes must hold which
values, and whether Secure Boot must be on. `installed_components` reads what a BMC's Redfish
FirmwareInventory reports; `compare` lists every drift; `plan` says how to repair them.

A baseline names a component by kind (its Redfish SoftwareId: "BIOS", "BMC", "VBIOS", "NIC"),
which covers every component of that kind ("VBIOS": each GPU's), or by one component's name
("GPU3 VBIOS", "NIC0"), which wins over the kind. A component the baseline does not know is a
drift that no flash repairs: the node is quarantined, not trusted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core import validation

BIOS = "BIOS"  # the kind a flash targets through the System, applied at the next boot
BMC = "BMC"  # the kind a BMC applies by restarting itself, not the host
SECURE_BOOT = "Secure Boot"
BIOS_ATTRIBUTE = "BIOS attribute"
SHORT_DIGEST = 16  # hex digits of a digest in a drift's description

NAME = re.compile(r"[-a-zA-Z0-9_]{1,64}")
COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# A file name under GPUFLEET_FIRMWARE_IMAGE_BASE_URL: no slash, so it cannot point elsewhere.
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
ATTRIBUTE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
MAX_ATTRIBUTE_TEXT = 256
MAX_COMPONENTS = 64
MAX_ATTRIBUTES = 256
MAX_BOOT_RELEASES = 256
MAX_RELEASE_LENGTH = 128  # attestation's ReferenceValue.release


@dataclass(frozen=True)
class Expected:
    version: str
    sha256: str
    image: str  # the image file that installs this version; "": none, a drift is not repaired


@dataclass(frozen=True)
class Baseline:
    name: str
    gpu_model: str  # the node class it applies to; "": every node no other baseline matches
    components: Mapping[str, Expected]  # by kind or by one component's name
    bios_attributes: Mapping[str, str | int | bool]
    secure_boot_required: bool
    # The boot-chain releases the class may boot, as reference values name them; of a component
    # one of them names, attestation refuses every other release. Empty: any release not retired.
    boot_releases: tuple[str, ...] = ()

    def expected(self, installed: Installed) -> Expected | None:
        return self.components.get(installed.name) or self.components.get(installed.kind)


@dataclass(frozen=True)
class Installed:
    """One firmware component as the node's BMC reports it."""

    name: str  # "BIOS", "BMC", "GPU3 VBIOS", "NIC0"
    kind: str  # its SoftwareId: "BIOS", "VBIOS", ...
    version: str
    sha256: str  # "" if the BMC reports no measurement
    target: str  # what SimpleUpdate names to flash it: the inventory item, the System for the BIOS


@dataclass(frozen=True)
class SecureBoot:
    enabled: bool  # SecureBootEnable: what the next boot does
    current_boot: str  # SecureBootCurrentBoot: "Enabled" or "Disabled", as this boot ran

    @property
    def on_now_and_next_boot(self) -> bool:
        return self.enabled and self.current_boot == "Enabled"

    def described(self) -> str:
        if self.current_boot == "Enabled" and not self.enabled:
            return "Enabled, but disabled from the next boot"
        return self.current_boot or "nothing"


@dataclass(frozen=True)
class Found:
    """What a node runs: its firmware, BIOS attributes and Secure Boot, as its BMC reports them."""

    components: Mapping[str, Installed]
    bios_attributes: Mapping[str, object]
    secure_boot: SecureBoot

    def facts(self) -> dict[str, object]:
        """What a tenant may read in the node's signed attestation result."""
        return {
            "components": {
                name: {"version": c.version, "digest": c.sha256} for name, c in sorted(self.components.items())
            },
            "secure_boot": self.secure_boot.current_boot,
        }


@dataclass(frozen=True)
class Drift:
    component: str  # "BMC", "GPU3 VBIOS", "BIOS attribute SriovEnable", "Secure Boot"
    expected: str
    found: str
    repairable: bool

    def __str__(self) -> str:
        return f"{self.component} expected {self.expected} found {self.found}"


@dataclass(frozen=True)
class Flash:
    component: str
    image: str
    target: str


@dataclass(frozen=True)
class Repair:
    flashes: tuple[Flash, ...]
    bios_settings: Mapping[str, str | int | bool]  # to PATCH into the BIOS's pending settings
    enable_secure_boot: bool
    reboot: bool  # BIOS flashes, settings and Secure Boot take effect at the next boot; so do GPU and NIC flashes


def describe(drifts: Iterable[Drift]) -> str:
    """The drifts in one line, for the quarantine reason."""
    return "; ".join(map(str, drifts))


# -- reading what the BMC reports -------------------------------------------------------------


def installed_components(
    items: Iterable[Mapping[str, Any]], *, system: str, managers: Collection[str] = ()
) -> dict[str, Installed]:
    """The node's components among a BMC's FirmwareInventory members (Redfish SoftwareInventory).

    An item is the node's when one of its RelatedItem is the node's System (`system`, its path),
    a resource under it (a GPU's Processor) or a manager of it; an item related to nothing is the
    node's too, as a BMC of one server lists only its own. Its kind is its SoftwareId. Its name
    is "<processor> <kind>" when it belongs to a processor ("GPU3 VBIOS"), else its Id without the
    System's id in front ("node-001-NIC0" is "NIC0"; a BMC of one server says "NIC0" itself).
    """
    system = system.rstrip("/")
    system_id = system.rsplit("/", 1)[-1]
    found = {}
    for item in items:
        related = [r.get("@odata.id", "").rstrip("/") for r in item.get("RelatedItem") or () if isinstance(r, dict)]
        if related and not any(r == system or r.startswith(system + "/") or r in managers for r in related):
            continue
        item_id = str(item.get("Id") or str(item.get("@odata.id", "")).rsplit("/", 1)[-1])
        kind = str(item.get("SoftwareId") or "") or item_id
        processor = next((r.rsplit("/", 1)[-1] for r in related if r.startswith(system + "/Processors/")), None)
        name = f"{processor} {kind}" if processor is not None else item_id.removeprefix(f"{system_id}-")
        if name in found:  # two items would hide one another under one name
            name = item_id
        measurement = item.get("Measurement")
        digest = measurement.get("Measurement", "") if isinstance(measurement, dict) else ""
        found[name] = Installed(
            name=name,
            kind=kind,
            version=str(item.get("Version", "")),
            sha256=str(digest).lower(),
            target=system if kind == BIOS else str(item.get("@odata.id", "")),
        )
    return found


def secure_boot(resource: Mapping[str, object]) -> SecureBoot:
    """Redfish's SecureBoot resource of a System."""
    return SecureBoot(
        enabled=resource.get("SecureBootEnable") is True,
        current_boot=str(resource.get("SecureBootCurrentBoot") or ""),
    )


# -- comparing and repairing ------------------------------------------------------------------


def compare(baseline: Baseline, found: Found) -> list[Drift]:
    """Every way the node differs from the baseline: components (known, by version and digest;
    unknown; missing), BIOS attributes and Secure Boot. Empty: the node runs the baseline."""
    drifts = []
    for installed in sorted(found.components.values(), key=lambda c: _natural(c.name)):
        expected = baseline.expected(installed)
        if expected is None:
            drifts.append(Drift(installed.name, "nothing (not in the baseline)", _release(installed), False))
        elif _differs(installed, expected):
            drifts.append(Drift(installed.name, _release(expected), _release(installed), bool(expected.image)))
    for key, expected in sorted(baseline.components.items()):
        if not any(key in (c.name, c.kind) for c in found.components.values()):
            drifts.append(Drift(key, _release(expected), "nothing", False))
    for attribute, wanted in sorted(baseline.bios_attributes.items()):
        present = attribute in found.bios_attributes
        value = found.bios_attributes.get(attribute)
        if not (present and _same(value, wanted)):
            # An attribute this BIOS lacks cannot be set: the baseline does not fit its firmware.
            shown = json.dumps(value) if present else "nothing"
            drifts.append(Drift(f"{BIOS_ATTRIBUTE} {attribute}", json.dumps(wanted), shown, present))
    if baseline.secure_boot_required and not found.secure_boot.on_now_and_next_boot:
        drifts.append(Drift(SECURE_BOOT, "Enabled", found.secure_boot.described(), True))
    return drifts


def plan(baseline: Baseline, found: Found) -> Repair:
    """What brings the node to the baseline: the images to flash (the baseline's, onto each
    drifting component), the BIOS settings to patch, whether to enable Secure Boot, and whether
    the host must reboot for it. Only for a node whose every drift is repairable."""
    flashes = tuple(
        Flash(installed.name, expected.image, installed.target)
        for installed in sorted(found.components.values(), key=lambda c: _natural(c.name))
        if (expected := baseline.expected(installed)) is not None and _differs(installed, expected)
    )
    settings = {
        attribute: wanted
        for attribute, wanted in sorted(baseline.bios_attributes.items())
        if not _same(found.bios_attributes.get(attribute), wanted)
    }
    secure_boot_required = baseline.secure_boot_required
    host_flash = any(found.components[f.component].kind != BMC for f in flashes)
    return Repair(
        flashes=flashes,
        bios_settings=settings,
        enable_secure_boot=secure_boot_required and not found.secure_boot.enabled,
        reboot=host_flash or bool(settings) or (secure_boot_required and found.secure_boot.current_boot != "Enabled"),
    )


def _differs(installed: Installed, expected: Expected) -> bool:
    return installed.version != expected.version or installed.sha256 != expected.sha256


def _same(found: object, wanted: object) -> bool:
    """Equal and of one type: a BIOS that says 1 where the baseline says true has drifted."""
    return type(found) is type(wanted) and found == wanted


def _release(component: Installed | Expected) -> str:
    digest = component.sha256[:SHORT_DIGEST] + "…" if component.sha256 else "none"
    return f"{component.version or '(no version)'} (sha256 {digest})"


def _natural(name: str) -> list[int | str]:
    """GPU2 before GPU10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


# -- the baselines operators publish -----------------------------------------------------------


def parse_baselines(document: object, *, released: Mapping[str, Expected] | None = None) -> list[Baseline]:
    """`{"baselines": [{"name", "gpu_model"?, "components": {COMPONENT: {"version", "sha256",
    "image"?}}, "bios_attributes"?: {NAME: string | integer | boolean}, "secure_boot_required"?,
    "boot_releases"?: [RELEASE]}]}`;
    anything malformed raises core.validation.Invalid naming the place. Each baseline expects the
    `released` components too (newest_releases), where it names none of its own in their place."""
    entries = validation.sequence(
        validation.mapping(document, "").get("baselines"), "baselines", min_items=1, max_items=100
    )
    baselines = []
    for number, entry in enumerate(entries):
        where = validation.at("baselines", number)
        entry = validation.mapping(entry, where)
        baselines.append(
            Baseline(
                name=validation.matches(
                    entry.get("name"), validation.at(where, "name"), NAME, "a slug of letters, digits, - and _"
                ),
                gpu_model=validation.text(
                    entry.get("gpu_model", ""), validation.at(where, "gpu_model"), max_length=128, min_length=0
                ),
                components=parse_components(
                    entry.get("components", {}), validation.at(where, "components"), released or {}
                ),
                bios_attributes=parse_bios_attributes(
                    entry.get("bios_attributes", {}), validation.at(where, "bios_attributes")
                ),
                secure_boot_required=validation.one_of(
                    entry.get("secure_boot_required", True), validation.at(where, "secure_boot_required"), (True, False)
                ),
                boot_releases=parse_boot_releases(
                    entry.get("boot_releases", []), validation.at(where, "boot_releases")
                ),
            )
        )
    models = [b.gpu_model for b in baselines]
    if len(set(models)) < len(models):
        raise validation.Invalid("baselines", "one baseline per GPU model (and one default, without)")
    return baselines


def parse_components(value: object, where: str, released: Mapping[str, Expected]) -> dict[str, Expected]:
    components = dict(released)
    for key, entry in validation.mapping(value, where, max_items=MAX_COMPONENTS).items():
        at = validation.at(where, key)
        validation.matches(key, at, COMPONENT, "a component: letters, digits, space, . _ -")
        entry = validation.mapping(entry, at)
        components[key] = Expected(
            version=validation.text(entry.get("version"), validation.at(at, "version"), max_length=128),
            sha256=validation.matches(
                entry.get("sha256"), validation.at(at, "sha256"), SHA256, "64 lower-case hex digits"
            ),
            image=parse_image(entry.get("image", ""), validation.at(at, "image")),
        )
    if not components:
        raise validation.Invalid(where, "must name at least one component", value)
    return components


def newest_releases(document: object) -> dict[str, Expected]:
    """The newest release of each kind of component in a vendor's release list, as bmcsim publishes
    one (GET /bmcsim/v1/firmware-releases): `{"hash_algorithm": "sha256", "components": {KIND:
    [{"release", "image", "digest", ...}, ...]}}`, oldest first, each `release` as the
    FirmwareInventory's Version shows it and `digest` the SHA-256 of its image."""
    document = validation.mapping(document, "")
    validation.one_of(document.get("hash_algorithm"), "hash_algorithm", ("sha256",))
    newest = {}
    for kind, listed in validation.mapping(document.get("components"), "components", min_items=1).items():
        where = validation.at("components", kind)
        validation.matches(kind, where, COMPONENT, "a component: letters, digits, space, . _ -")
        releases = validation.sequence(listed, where, min_items=1, expected="a list of releases, oldest first")
        at = validation.at(where, len(releases) - 1)
        release = validation.mapping(releases[-1], at)
        newest[kind] = Expected(
            version=validation.text(release.get("release"), validation.at(at, "release"), max_length=128),
            sha256=validation.matches(
                release.get("digest"), validation.at(at, "digest"), SHA256, "64 lower-case hex digits"
            ),
            image=parse_image(release.get("image", ""), validation.at(at, "image")),
        )
    return newest


def parse_image(value: object, where: str) -> str:
    if value == "":
        return value
    return validation.matches(value, where, IMAGE, "a file name (no slash) under the firmware image base URL")


def parse_boot_releases(value: object, where: str) -> tuple[str, ...]:
    """Release names, as the reference values name them ("vmlinuz-6.8.0-49-generic"), each once."""
    releases = validation.sequence(value, where, max_items=MAX_BOOT_RELEASES, expected="a list of release names")
    for position, release in enumerate(releases):
        validation.text(release, validation.at(where, position), max_length=MAX_RELEASE_LENGTH)
    if len(set(releases)) < len(releases):
        raise validation.Invalid(where, "must name each release once", value)
    return tuple(releases)


def parse_bios_attributes(value: object, where: str) -> dict[str, str | int | bool]:
    """BIOS attributes as Redfish's Bios resource has them: strings, integers and booleans."""
    attributes = validation.mapping(value, where, max_items=MAX_ATTRIBUTES, expected="an object of BIOS attributes")
    for name, wanted in attributes.items():
        at = validation.at(where, name)
        validation.matches(name, at, ATTRIBUTE, "a BIOS attribute name")
        if isinstance(wanted, str):
            validation.text(wanted, at, max_length=MAX_ATTRIBUTE_TEXT, min_length=0)
        elif not isinstance(wanted, int | bool):
            raise validation.Invalid(at, "must be a string, an integer or a boolean", wanted)
    return dict(attributes)
