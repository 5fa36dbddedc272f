"""The simulated firmware, boot-chain and GPU software releases, and their golden digests.

A digest is a hash over a fixed string naming the release, so every bmcsim process and anyone
reading `reference_values()` agree on it without shipping images. The last release of each
component is what a node carries from the factory; the one before it is still a valid release.

Firmware (what UpdateService's FirmwareInventory lists and SimpleUpdate flashes) comes in four
kinds: the host's BIOS (the boot chain's `firmware`), the BMC's, each GPU's VBIOS and the NIC's.
An image is published as `GF-<kind>-<version>.bin` (`firmware_image`), e.g. GF-BIOS-2.4.0.bin,
GF-VBIOS-96.00.99.00.01.bin; its digest (`firmware_digest`) is the SHA-256 of the image, for the
BIOS the very digest its boot measures into PCR 0.
"""

from __future__ import annotations

import hashlib
import re
import struct

from core.topology import GPU_MODEL

BOOT_COMPONENTS = ("firmware", "bootloader", "kernel", "initrd", "cmdline")

# Where each boot component is measured, as UEFI firmware and GRUB do: firmware code in PCR 0,
# the boot manager in PCR 4, the kernel command line in PCR 8, kernel and initrd files in PCR 9.
PCR_OF = {"firmware": 0, "bootloader": 4, "kernel": 9, "initrd": 9, "cmdline": 8}
QUOTED_PCRS = (0, 4, 8, 9)

BOOT_RELEASES = {
    "firmware": ("GF-BIOS 2.3.1", "GF-BIOS 2.4.0"),
    "bootloader": ("shim 15.7 grub 2.06", "shim 15.8 grub 2.12"),
    "kernel": ("vmlinuz-6.8.0-45-generic", "vmlinuz-6.8.0-49-generic"),
    "initrd": ("initrd.img-6.8.0-45-generic", "initrd.img-6.8.0-49-generic"),
    "cmdline": (
        "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=LABEL=root ro iommu=pt",
        "BOOT_IMAGE=/vmlinuz-6.8.0-49-generic root=LABEL=root ro iommu=pt",
    ),
}
GPU_COMPONENTS = ("vbios", "driver")
GPU_RELEASES = {
    "vbios": ("96.00.74.00.01", "96.00.99.00.01"),
    "driver": ("550.90.07", "560.35.03"),
}

FIRMWARE_KINDS = ("BIOS", "BMC", "VBIOS", "NIC")
FIRMWARE_RELEASES = {
    "BIOS": BOOT_RELEASES["firmware"],
    "BMC": ("GF-BMC 1.4.2", "GF-BMC 1.5.0"),
    "VBIOS": GPU_RELEASES["vbios"],
    "NIC": ("GF-NIC 28.39.1002", "GF-NIC 28.41.1000"),
}
# What a tampered component reports: its release with this suffix (and a digest no release has).
TAMPERED_SUFFIX = "-custom"
_IMAGE = re.compile(r"GF-(?P<kind>[A-Z]+)-(?P<version>[0-9A-Za-z._+-]+)\.bin")

# UEFI Secure Boot as firmware measures it (TCG PC Client Platform Firmware Profile): the
# SecureBoot variable of the EFI global-variable GUID, as UEFI_VARIABLE_DATA, extended into PCR 7
# by an EV_EFI_VARIABLE_DRIVER_CONFIG event whose digest is the SHA-256 of that structure.
SECURE_BOOT_PCR = 7
SECURE_BOOT_COMPONENT = "secureboot"
EFI_GLOBAL_VARIABLE = bytes.fromhex("61dfe48bca93d211aa0d00e098032b8c")  # 8be4df61-93ca-11d2-aa0d-00e098032b8c


def boot_digest(component: str, release: str) -> str:
    return hashlib.sha256(f"bmcsim/{component}/{release}".encode()).hexdigest()


def gpu_digest(component: str, release: str) -> str:
    return hashlib.sha384(f"bmcsim/gpu/{GPU_MODEL}/{component}/{release}".encode()).hexdigest()


def firmware_version(kind: str, release: str) -> str:
    """The bare version of a release: "2.4.0" of "GF-BIOS 2.4.0"; a VBIOS release is its version."""
    return release.removeprefix(f"GF-{kind} ")


def firmware_image(release: str, kind: str = "BIOS") -> str:
    """The file name a firmware release is published under, e.g. GF-BIOS-2.4.0.bin, GF-VBIOS-96.00.99.00.01.bin."""
    return f"GF-{kind}-{firmware_version(kind, release)}.bin"


def firmware_release(image_uri: str) -> tuple[str, str] | None:
    """(kind, release) of the firmware image an UpdateService ImageURI points at, by its file name."""
    match = _IMAGE.fullmatch(image_uri.rsplit("/", 1)[-1])
    if match is None or match["kind"] not in FIRMWARE_RELEASES:
        return None
    kind = match["kind"]
    release = next((r for r in FIRMWARE_RELEASES[kind] if firmware_version(kind, r) == match["version"]), None)
    return (kind, release) if release else None


def firmware_images() -> list[str]:
    return [firmware_image(r, kind) for kind in FIRMWARE_KINDS for r in FIRMWARE_RELEASES[kind]]


def firmware_digest(kind: str, release: str) -> str:
    """SHA-256 of a firmware image. The BIOS's is what its boot measures into PCR 0."""
    if kind == "BIOS":
        return boot_digest("firmware", release)
    return hashlib.sha256(f"bmcsim/firmware/{kind}/{release}".encode()).hexdigest()


def tampered_version(release: str) -> str:
    return release + TAMPERED_SUFFIX


def tampered_digest(node: str, component: str, version: str) -> str:
    """SHA-256 of a tampered component's image (`firmware_tamper`): of no release."""
    return hashlib.sha256(f"bmcsim/firmware/tampered/{node}/{component}/{version}".encode()).hexdigest()


def firmware_reference() -> dict:
    """Every firmware release, served at GET /bmcsim/v1/firmware-releases::

    {"hash_algorithm": "sha256",
     "components": {"BIOS": [{"release", "version", "image", "digest"}, ...],
                    "BMC": [...], "VBIOS": [...], "NIC": [...]}}

    `release` is what FirmwareInventory's Version shows, `digest` its Measurement; the last of each
    list is the factory release."""
    return {
        "hash_algorithm": "sha256",
        "components": {
            kind: [
                {
                    "release": r,
                    "version": firmware_version(kind, r),
                    "image": firmware_image(r, kind),
                    "digest": firmware_digest(kind, r),
                }
                for r in FIRMWARE_RELEASES[kind]
            ]
            for kind in FIRMWARE_KINDS
        },
    }


def secure_boot_variable(enabled: bool) -> bytes:
    """UEFI_VARIABLE_DATA of the SecureBoot variable: GUID, name length, data length, UCS-2 name, data."""
    name, value = "SecureBoot", b"\x01" if enabled else b"\x00"
    return EFI_GLOBAL_VARIABLE + struct.pack("<QQ", len(name), len(value)) + name.encode("utf-16-le") + value


def secure_boot_digest(enabled: bool) -> str:
    return hashlib.sha256(secure_boot_variable(enabled)).hexdigest()


def implant_kernel_digest(node: str) -> str:
    """The tampered kernel the `implant` fault writes: in no reference list."""
    return hashlib.sha256(f"bmcsim/kernel/implant/{node}".encode()).hexdigest()


def factory_boot_images() -> dict[str, str]:
    return {c: boot_digest(c, BOOT_RELEASES[c][-1]) for c in BOOT_COMPONENTS}


def factory_gpu_measurements() -> dict[str, str]:
    return {c: gpu_digest(c, GPU_RELEASES[c][-1]) for c in GPU_COMPONENTS}


def reference_values(quoted_pcrs: tuple[int, ...] = QUOTED_PCRS) -> dict:
    """The golden-digest manifest, served at GET /bmcsim/v1/reference-values.

    Shape::

        {"issuer": "bmcsim", "version": 1,
         "boot": {"hash_algorithm": "sha256",
                  "pcrs": {"firmware": 0, "bootloader": 4, "kernel": 9, "initrd": 9, "cmdline": 8},
                  "quoted_pcrs": [0, 4, 8, 9],
                  "components": {"firmware": [{"release": "GF-BIOS 2.4.0", "digest": "<hex>"}, ...],
                                 "bootloader": [...], "kernel": [...], "initrd": [...], "cmdline": [...]}},
         "gpu": {"hash_algorithm": "sha384", "model": "NVIDIA H100 80GB HBM3",
                 "measurements": {"vbios": [{"release", "digest"}, ...], "driver": [...]}}}

    Every listed digest is acceptable; a boot-chain event or GPU measurement whose digest is not
    listed for its component is unknown (the `implant` kernel is never listed).

    With PCR 7 quoted (bmcsim's --quoted-pcrs, off by default), the boot also lists the
    `secureboot` component in PCR 7, whose one golden digest is the SecureBoot variable enabled.
    """
    pcrs, components = (
        dict(PCR_OF),
        {c: [{"release": r, "digest": boot_digest(c, r)} for r in BOOT_RELEASES[c]] for c in BOOT_COMPONENTS},
    )
    if SECURE_BOOT_PCR in quoted_pcrs:
        pcrs[SECURE_BOOT_COMPONENT] = SECURE_BOOT_PCR
        components[SECURE_BOOT_COMPONENT] = [{"release": "SecureBoot enabled", "digest": secure_boot_digest(True)}]
    return {
        "issuer": "bmcsim",
        "version": 1,
        "boot": {
            "hash_algorithm": "sha256",
            "pcrs": pcrs,
            "quoted_pcrs": sorted(quoted_pcrs),
            "components": components,
        },
        "gpu": {
            "hash_algorithm": "sha384",
            "model": GPU_MODEL,
            "measurements": {
                c: [{"release": r, "digest": gpu_digest(c, r)} for r in GPU_RELEASES[c]] for c in GPU_COMPONENTS
            },
        },
    }
