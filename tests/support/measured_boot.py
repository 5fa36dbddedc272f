"""A measured boot as firmware, shim and GRUB do it, for a software TPM (tests/support/swtpm.py): each
event's digests extended into the TPM's PCRs, and logged in the binary TCG crypto-agile format the
kernel serves at /sys/kernel/security/tpm0/binary_bios_measurements; and the known-good manifest
of reference values the control plane appraises such a boot with."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

from tests.support.swtpm import SoftwareTPM

# TCG PC Client Platform Firmware Profile: event types and the crypto-agile log's header.
EV_NO_ACTION = 0x00000003
EV_SEPARATOR = 0x00000004
EV_S_CRTM_VERSION = 0x00000008
EV_IPL = 0x0000000D
EV_EFI_VARIABLE_DRIVER_CONFIG = 0x80000001
EV_EFI_BOOT_SERVICES_APPLICATION = 0x80000003
EV_EFI_ACTION = 0x80000007
EV_EFI_PLATFORM_FIRMWARE_BLOB2 = 0x8000000A
SPEC_ID_SIGNATURE = b"Spec ID Event03\0"
TPM_ALG_SHA1, TPM_ALG_SHA256 = 0x0004, 0x000B
BANKS = {TPM_ALG_SHA1: hashlib.sha1, TPM_ALG_SHA256: hashlib.sha256}
EFI_GLOBAL_VARIABLE = bytes.fromhex("61dfe48bca93d211aa0d00e098032b8c")  # 8be4df61-93ca-11d2-aa0d-00e098032b8c


# Writing a binary event log, as firmware lays it out.


@dataclass(frozen=True)
class Measurement:
    pcr: int
    event_type: int
    data: bytes  # what the log records
    digests: dict[int, bytes]  # what is extended, per bank
    component: str | None  # where a known-good manifest lists the digest; None: not in the evidence


def measure(pcr: int, event_type: int, data: bytes, component: str | None, image: bytes | None = None) -> Measurement:
    """An event whose digests hash `image` (a firmware volume, a PE file, a kernel), else the logged data."""
    measured = data if image is None else image
    return Measurement(pcr, event_type, data, {alg: h(measured).digest() for alg, h in BANKS.items()}, component)


def not_extended(pcr: int, data: bytes) -> Measurement:
    return Measurement(pcr, EV_NO_ACTION, data, {alg: bytes(h().digest_size) for alg, h in BANKS.items()}, None)


def grub_command_line(text: str) -> Measurement:
    """GRUB logs a command or the kernel command line after a "grub_cmd: " or "kernel_cmdline: " prefix and
    with its NUL, and measures it without either."""
    return measure(8, EV_IPL, ascii_string(text), "cmdline", image=text.split(" ", 1)[1].encode())


def ascii_string(text: str) -> bytes:
    return text.encode() + b"\0"


def ucs2_string(text: str) -> bytes:
    return (text + "\0").encode("utf-16-le")


def firmware_blob2(description: str, base: int, length: int) -> bytes:
    """UEFI_PLATFORM_FIRMWARE_BLOB2: a sized description, then where the blob was."""
    return bytes([len(description)]) + description.encode() + struct.pack("<QQ", base, length)


def image_load_event(file_path: str) -> bytes:
    """UEFI_IMAGE_LOAD_EVENT of an image loaded from `file_path` (a media file path node, then the end node)."""
    path = ucs2_string(file_path)
    device_path = struct.pack("<BBH", 0x04, 0x04, 4 + len(path)) + path + struct.pack("<BBH", 0x7F, 0xFF, 4)
    return struct.pack("<QQQQ", 0x7A5E_1000, 0x0010_0000, 0, len(device_path)) + device_path


def efi_variable(name: str, value: bytes) -> bytes:
    """UEFI_VARIABLE_DATA."""
    unicode_name = name.encode("utf-16-le")
    return EFI_GLOBAL_VARIABLE + struct.pack("<QQ", len(name), len(value)) + unicode_name + value


def spec_id_event(banks: dict[int, int]) -> bytes:
    """The TCG_PCR_EVENT (SHA-1 format) a crypto-agile log starts with, its data the Spec ID Event03 header."""
    spec = (
        SPEC_ID_SIGNATURE
        + struct.pack("<IBBBB", 0, 0, 2, 2, 2)  # platformClass client, spec 2.0 errata 2, UINTN of 8 bytes
        + struct.pack("<I", len(banks))
        + b"".join(struct.pack("<HH", alg, size) for alg, size in banks.items())
        + b"\0"  # no vendor info
    )
    return struct.pack("<II", 0, EV_NO_ACTION) + bytes(20) + struct.pack("<I", len(spec)) + spec


def pcr_event2(measurement: Measurement) -> bytes:
    digests = b"".join(struct.pack("<H", alg) + digest for alg, digest in measurement.digests.items())
    return (
        struct.pack("<III", measurement.pcr, measurement.event_type, len(measurement.digests))
        + digests
        + struct.pack("<I", len(measurement.data))
        + measurement.data
    )


def event_log(boot: tuple[Measurement, ...]) -> bytes:
    return spec_id_event({alg: h().digest_size for alg, h in BANKS.items()}) + b"".join(map(pcr_event2, boot))


def linux_boot(kernel_image: bytes) -> tuple[Measurement, ...]:
    """UEFI firmware, shim and GRUB booting Linux, in the order they extend; the kernel's image is `kernel_image`."""
    command_line = "/vmlinuz-6.8.0-49-generic root=LABEL=root ro iommu=pt"
    return (
        not_extended(0, b"StartupLocality\0\x00"),  # locality 0: PCR 0 starts from zeros
        measure(0, EV_S_CRTM_VERSION, ucs2_string("GF-BIOS 2.4.0"), "firmware"),
        measure(0, EV_EFI_PLATFORM_FIRMWARE_BLOB2, firmware_blob2("Fv(PEI)", 0xFF00_0000, 0x20_0000), "firmware",
                image=b"GF-BIOS 2.4.0 PEI firmware volume"),
        measure(0, EV_EFI_PLATFORM_FIRMWARE_BLOB2, firmware_blob2("Fv(DXE)", 0xFF20_0000, 0x60_0000), "firmware",
                image=b"GF-BIOS 2.4.0 DXE firmware volume"),
        measure(7, EV_EFI_VARIABLE_DRIVER_CONFIG, efi_variable("SecureBoot", b"\x01"), None),
        measure(4, EV_EFI_ACTION, b"Calling EFI Application from Boot Option", "bootloader"),
        measure(0, EV_SEPARATOR, bytes(4), "firmware"),
        measure(4, EV_SEPARATOR, bytes(4), "bootloader"),
        measure(7, EV_SEPARATOR, bytes(4), None),
        measure(4, EV_EFI_BOOT_SERVICES_APPLICATION, image_load_event(r"\EFI\ubuntu\shimx64.efi"), "bootloader",
                image=b"shim 15.8 PE image"),
        measure(4, EV_EFI_BOOT_SERVICES_APPLICATION, image_load_event(r"\EFI\ubuntu\grubx64.efi"), "bootloader",
                image=b"grub 2.12 PE image"),
        measure(9, EV_IPL, ascii_string("/boot/grub/grub.cfg"), "kernel", image=b"set default=0\nmenuentry ..."),
        grub_command_line(f"grub_cmd: linux {command_line}"),
        measure(9, EV_IPL, ascii_string("/vmlinuz-6.8.0-49-generic"), "kernel", image=kernel_image),
        grub_command_line(f"kernel_cmdline: {command_line}"),
        grub_command_line("grub_cmd: initrd /initrd.img-6.8.0-49-generic"),
        measure(9, EV_IPL, ascii_string("/initrd.img-6.8.0-49-generic"), "initrd", image=b"initrd 6.8.0-49 cpio"),
    )  # fmt: skip


KNOWN_GOOD_BOOT = linux_boot(b"vmlinuz-6.8.0-49-generic bzImage")


def boot(tpm: SoftwareTPM, log_path: Path, measurements: tuple[Measurement, ...]) -> None:
    """What firmware and GRUB do: extend every bank of each PCR, and hand over the log of it."""
    tpm.run(
        "tpm2_pcrextend",
        *(
            f"{m.pcr}:sha1={m.digests[TPM_ALG_SHA1].hex()},sha256={m.digests[TPM_ALG_SHA256].hex()}"
            for m in measurements
            if m.event_type != EV_NO_ACTION
        ),
    )
    log_path.write_bytes(event_log(measurements))


def known_good_manifest(measurements: tuple[Measurement, ...]) -> dict:
    """A reference-value manifest listing every digest the known-good boot puts into a quoted PCR."""
    components: dict[str, list[dict]] = {}
    for position, m in enumerate(measurements):
        if m.component is not None:
            release = f"known-good boot, event {position}"
            components.setdefault(m.component, []).append(
                {"release": release, "digest": m.digests[TPM_ALG_SHA256].hex()}
            )
    return {
        "issuer": "test host image pipeline",
        "version": 1,
        "boot": {
            "hash_algorithm": "sha256",
            "pcrs": {"firmware": 0, "bootloader": 4, "kernel": 9, "initrd": 9, "cmdline": 8},
            "quoted_pcrs": [0, 4, 8, 9],
            "components": components,
        },
        "gpu": {"hash_algorithm": "sha384", "model": "none", "measurements": {}},
    }
