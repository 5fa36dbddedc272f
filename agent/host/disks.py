"""The node's disks, as the kernel lists them under /sys/block.

/sys/block holds whole block devices only (partitions sit inside them). Left out are those
that are no drive of the node: loop, ram, zram, device-mapper (dm-), software RAID (md),
network (nbd) and optical (sr) devices; removable media, such as the BMC's virtual USB disk or
a card reader; and the hidden per-path devices of NVMe multipathing, whose namespace is listed
once on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NOT_DRIVES = ("loop", "ram", "zram", "dm-", "md", "nbd", "sr")
# /sys/block/*/size counts 512-byte sectors whatever the drive's own block size.
SECTOR_BYTES = 512
_VPD_UNIT_SERIAL_PAGE = 0x80


@dataclass(frozen=True)
class Disk:
    id: str  # the kernel's name: "nvme0n1", "sda"
    capacity_bytes: int
    model: str
    serial: str  # the serial number, or the world-wide name where the kernel shows no serial
    rotational: bool


def disks(root: str | Path = "/sys/block") -> list[Disk]:
    """The node's drives, by name."""
    found = []
    for entry in sorted(Path(root).iterdir()):
        if entry.name.startswith(NOT_DRIVES) or _read(entry / "removable") == "1" or _read(entry / "hidden") == "1":
            continue
        found.append(
            Disk(
                id=entry.name,
                capacity_bytes=int(_read(entry / "size") or 0) * SECTOR_BYTES,
                model=_read(entry / "device" / "model"),
                serial=_serial(entry),
                rotational=_read(entry / "queue" / "rotational") == "1",
            )
        )
    return found


def _serial(disk: Path) -> str:
    return (
        _read(disk / "device" / "serial")  # NVMe: the controller's
        or _read(disk / "serial")  # virtio-blk
        or _vpd_unit_serial(disk / "device" / "vpd_pg80")  # SCSI, SAS and SATA behind libata
        or _read(disk / "device" / "wwid")  # SCSI without a unit serial number page
        or _read(disk / "wwid")  # NVMe namespace
    )


def _vpd_unit_serial(path: Path) -> str:
    """The serial number in a SCSI Unit Serial Number VPD page: 4 header bytes, the length in bytes 2-3."""
    try:
        page = path.read_bytes()
    except OSError:
        return ""
    if len(page) < 4 or page[1] != _VPD_UNIT_SERIAL_PAGE:
        return ""
    length = int.from_bytes(page[2:4], "big")
    return page[4 : 4 + length].decode("ascii", "replace").strip()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""
