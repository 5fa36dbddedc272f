"""The simulated firmware, boot-chain and GPU software releases, and their golden digests.

A digest is a hash over a fixed string naming the release, so every bmcsim process and anyone
reading `reference_values()` agree on it without shipping images. The last release of each
component is what a node carries from the factory; the one before it is still a valid release.
"""

from __future__ import annotations

import hashlib

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
BMC_FIRMWARE_VERSION = "bmcsim-bmc 1.4.2"


def boot_digest(component: str, release: str) -> str:
    return hashlib.sha256(f"bmcsim/{component}/{release}".encode()).hexdigest()


def gpu_digest(component: str, release: str) -> str:
    return hashlib.sha384(f"bmcsim/gpu/{GPU_MODEL}/{component}/{release}".encode()).hexdigest()


def firmware_image(release: str) -> str:
    """The file name a firmware release is published under, e.g. GF-BIOS-2.4.0.bin."""
    return release.replace(" ", "-") + ".bin"


def firmware_release(image_uri: str) -> str | None:
    """The firmware release an UpdateService ImageURI points at, by its file name."""
    name = image_uri.rsplit("/", 1)[-1]
    return next((r for r in BOOT_RELEASES["firmware"] if firmware_image(r) == name), None)


def implant_kernel_digest(node: str) -> str:
    """The tampered kernel the `implant` fault writes: in no reference list."""
    return hashlib.sha256(f"bmcsim/kernel/implant/{node}".encode()).hexdigest()


def factory_boot_images() -> dict[str, str]:
    return {c: boot_digest(c, BOOT_RELEASES[c][-1]) for c in BOOT_COMPONENTS}


def factory_gpu_measurements() -> dict[str, str]:
    return {c: gpu_digest(c, GPU_RELEASES[c][-1]) for c in GPU_COMPONENTS}


def reference_values() -> dict:
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
    """
    return {
        "issuer": "bmcsim",
        "version": 1,
        "boot": {
            "hash_algorithm": "sha256",
            "pcrs": dict(PCR_OF),
            "quoted_pcrs": list(QUOTED_PCRS),
            "components": {
                c: [{"release": r, "digest": boot_digest(c, r)} for r in BOOT_RELEASES[c]] for c in BOOT_COMPONENTS
            },
        },
        "gpu": {
            "hash_algorithm": "sha384",
            "model": GPU_MODEL,
            "measurements": {
                c: [{"release": r, "digest": gpu_digest(c, r)} for r in GPU_RELEASES[c]] for c in GPU_COMPONENTS
            },
        },
    }
