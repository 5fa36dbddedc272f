"""The node's disks from /sys/block: a fake sysfs tree of the kinds of block devices a GPU server
has, and this machine's own /sys/block."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.host.disks import NOT_DRIVES, Disk, disks

SYS_BLOCK = Path("/sys/block")


def block_device(
    root: Path, name: str, sectors: int, rotational: bool = False, files: dict[str, str | bytes] | None = None
) -> None:
    """A /sys/block entry with its size, rotational and removable files, and `files` by relative path."""
    entry = root / name
    (entry / "queue").mkdir(parents=True)
    (entry / "size").write_text(f"{sectors}\n")
    (entry / "queue" / "rotational").write_text("1\n" if rotational else "0\n")
    (entry / "removable").write_text("0\n")
    for path, content in (files or {}).items():
        target = entry / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)


def vpd_unit_serial_page(serial: str) -> bytes:
    return bytes([0x00, 0x80]) + len(serial).to_bytes(2, "big") + serial.encode()


@pytest.fixture
def sys_block(tmp_path) -> Path:
    root = tmp_path / "block"
    # An NVMe drive: model and serial on its controller, a world-wide name on the namespace.
    block_device(
        root,
        "nvme0n1",
        7_501_476_528,
        files={
            "device/model": "SAMSUNG MZWLR7T6HALA-00007           \n",
            "device/serial": "S6EUNA0R123456      \n",
            "wwid": "eui.36344730526001230025384500000001\n",
        },
    )
    # A SATA hard disk behind libata: the serial is in the SCSI unit serial number page.
    block_device(
        root,
        "sda",
        31_251_759_104,
        rotational=True,
        files={
            "device/model": "ST16000NM001G-2KK103\n",
            "device/vpd_pg80": vpd_unit_serial_page("        ZL2ABCDE"),
            "device/wwid": "naa.5000c500c1234567\n",
        },
    )
    # A SAS SSD that shows no unit serial number page: its world-wide name stands in.
    block_device(
        root,
        "sdb",
        3_750_748_848,
        files={"device/model": "PX05SMB040      \n", "device/wwid": "naa.50000399b8123456\n"},
    )
    # A virtio disk, as on a virtual machine: a serial on the disk itself, no model.
    block_device(root, "vda", 536_870_912, rotational=True, files={"serial": "overlayblkblock\n"})
    # One path of a multipathed NVMe namespace, hidden beside the namespace it belongs to.
    block_device(
        root, "nvme0c0n1", 7_501_476_528, files={"hidden": "1\n", "device/model": "SAMSUNG MZWLR7T6HALA-00007\n"}
    )
    # The BMC's virtual USB disk.
    block_device(root, "sdc", 2_048, files={"removable": "1\n", "device/model": "Virtual HDisk0  \n"})
    for name in ("loop0", "ram0", "zram0", "dm-0", "md127", "nbd0", "sr0"):
        block_device(root, name, 1_000)
    return root


def test_the_drives_of_the_node_are_listed_and_nothing_else(sys_block):
    assert disks(sys_block) == [
        Disk("nvme0n1", 7_501_476_528 * 512, "SAMSUNG MZWLR7T6HALA-00007", "S6EUNA0R123456", rotational=False),
        Disk("sda", 31_251_759_104 * 512, "ST16000NM001G-2KK103", "ZL2ABCDE", rotational=True),
        Disk("sdb", 3_750_748_848 * 512, "PX05SMB040", "naa.50000399b8123456", rotational=False),
        Disk("vda", 536_870_912 * 512, "", "overlayblkblock", rotational=True),
    ]


def test_a_namespace_without_a_controller_serial_shows_its_world_wide_name(tmp_path):
    block_device(tmp_path, "nvme1n1", 1_000, files={"wwid": "eui.0025388b91b3a4c1\n"})
    assert disks(tmp_path)[0].serial == "eui.0025388b91b3a4c1"


def test_what_sysfs_does_not_show_is_empty(tmp_path):
    (tmp_path / "sdz").mkdir()
    (tmp_path / "sdy").mkdir()
    (tmp_path / "sdy" / "device").mkdir()
    (tmp_path / "sdy" / "device" / "vpd_pg80").write_bytes(b"\x00\x83")
    assert disks(tmp_path) == [
        Disk("sdy", 0, "", "", rotational=False),
        Disk("sdz", 0, "", "", rotational=False),
    ]


def test_a_missing_root_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        disks(tmp_path / "absent")


def test_the_disks_of_this_machine_agree_with_its_sysfs():
    found = disks()
    assert found == disks(SYS_BLOCK)
    for disk in found:
        entry = SYS_BLOCK / disk.id
        assert entry.exists()
        assert not disk.id.startswith(NOT_DRIVES)
        assert disk.capacity_bytes == int((entry / "size").read_text()) * 512
        assert disk.rotational == ((entry / "queue" / "rotational").read_text().strip() == "1")
    listed = {disk.id for disk in found}
    for entry in SYS_BLOCK.iterdir():
        if entry.name not in listed:
            assert entry.name.startswith(NOT_DRIVES) or "1" in {
                sysfs_value(entry / "removable"),
                sysfs_value(entry / "hidden"),
            }


def sysfs_value(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""
