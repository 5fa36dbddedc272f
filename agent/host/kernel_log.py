"""XIDs from the kernel log, where NVIDIA's driver writes one line per XID.

The line has kept its shape across driver generations, with small differences:

    NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d ...                      (older drivers: no "PCI:")
    NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, ...
    NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>', name=<unknown>, Ch 00000008
    NVRM: Xid (PCI:0000:9b:00): 119, pid=4071838, name=python, Timeout after 45s ...
    NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 ...)   (a non-zero PCI domain)

behind whatever the reader put in front: dmesg's "[12345.678901] ", journalctl's
"Dec 01 10:00:00 host kernel: ", or a /dev/kmsg record header "6,2345,123456789,-;". The PCI
address has no function; it is normalised to NVML's form "00000000:18:00.0" to find the GPU.
"""

from __future__ import annotations

import os
import re
import select
import threading
from collections.abc import Iterable

from ..backend import GPU

_XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): (?P<xid>\d+)\b"
)
_PCI_ADDRESS = re.compile(
    r"(?:PCI:)?(?P<domain>[0-9a-fA-F]{1,8}):(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})(?:\.(?P<function>[0-7]))?"
)
# "priority,sequence,timestamp_us,flags[,more fields];message": the kernel may add fields before the ';'.
_KMSG_RECORD = re.compile(r"(?P<prefix>\d+),(?P<sequence>\d+),\d+,[^;]*;(?P<message>.*)")
_LOG_KERN = 0
# A /dev/kmsg read() returns one whole record, or EINVAL if the buffer is smaller than the
# record; no record is longer than the kernel's 8 KiB CONSOLE_EXT_LOG_MAX.
_KMSG_READ_BYTES = 8192


def normalise_pci_bus_id(address: str) -> str:
    """NVML's form "00000000:18:00.0" of a PCI address written "PCI:0000:18:00", "0000:18:00" or as NVML does."""
    match = _PCI_ADDRESS.fullmatch(address.strip())
    if match is None:
        raise ValueError(f"not a PCI address: {address!r}")
    domain, bus, device = (int(match[part], 16) for part in ("domain", "bus", "device"))
    return f"{domain:08X}:{bus:02X}:{device:02X}.{match['function'] or 0}"


def parse_xid(line: str) -> tuple[str, int] | None:
    """(PCI bus id in NVML's form, XID) of an NVRM XID line, whatever its prefix; None for any other line."""
    match = _XID_LINE.search(line)
    if match is None:
        return None
    return normalise_pci_bus_id(match["pci"]), int(match["xid"])


class XidCounter:
    """Counts the XIDs of a node's GPUs from kernel-log records; thread-safe.

    A /dev/kmsg record counts once however often it is fed: reading /dev/kmsg from the start
    replays the ring buffer, and sequence numbers only rise while the machine is up, so the
    highest one seen is all it takes. Lines without a record header (dmesg, journalctl) carry
    no sequence number and each one counts.
    """

    def __init__(self, gpus: Iterable[GPU]):
        self._index_by_pci_bus_id = {normalise_pci_bus_id(gpu.pci_bus_id): gpu.index for gpu in gpus}
        self._lock = threading.Lock()
        self._counts: dict[int, dict[int, int]] = {}
        self._last: dict[int, int] = {}
        self._highest_sequence = -1
        # XIDs logged for a PCI address that is none of this node's GPUs (one NVML does not see).
        self.xids_of_unknown_gpus = 0
        # Set once the records the kernel kept from before the agent started are read (or there is
        # no kernel log): the counts then hold every XID since boot, and a rise is a new XID.
        self.caught_up = threading.Event()

    def feed(self, record: str) -> None:
        """One kernel-log record: a /dev/kmsg record, a dmesg or a journal line.

        A /dev/kmsg record's " KEY=value" continuation lines, with it or on their own, count for nothing.
        """
        line = record.partition("\n")[0]
        kmsg = _KMSG_RECORD.fullmatch(line)
        with self._lock:
            if kmsg is not None:
                sequence = int(kmsg["sequence"])
                if sequence <= self._highest_sequence:
                    return
                self._highest_sequence = sequence
                # Writers to /dev/kmsg other than the kernel cannot use facility 0, so a forged XID is told apart.
                if int(kmsg["prefix"]) >> 3 != _LOG_KERN:
                    return
                line = kmsg["message"]
            parsed = parse_xid(line)
            if parsed is None:
                return
            pci_bus_id, xid = parsed
            index = self._index_by_pci_bus_id.get(pci_bus_id)
            if index is None:
                self.xids_of_unknown_gpus += 1
                return
            self._count(index, xid)

    def add(self, index: int, xid: int) -> None:
        """An XID reported for GPU `index` by another source, such as NVML's events."""
        with self._lock:
            self._count(index, xid)

    def _count(self, index: int, xid: int) -> None:
        per_xid = self._counts.setdefault(index, {})
        per_xid[xid] = per_xid.get(xid, 0) + 1
        self._last[index] = xid

    def counts(self) -> dict[int, dict[int, int]]:
        """GPU index -> XID -> times seen, for the GPUs that reported one; the counts only rise."""
        with self._lock:
            return {index: dict(per_xid) for index, per_xid in self._counts.items()}

    def last(self) -> dict[int, int]:
        """GPU index -> the last XID it reported, for the GPUs that reported one."""
        with self._lock:
            return dict(self._last)


class KmsgFollower:
    """Feeds a kernel log to an XidCounter from a daemon thread, from the first record kept on.

    `path` is /dev/kmsg on a node; any file or fifo of records, one a line, reads the same way:
    a file is followed as `tail -f` would, waiting `idle_seconds` at its end.
    """

    def __init__(self, counter: XidCounter, path: str = "/dev/kmsg", idle_seconds: float = 1.0):
        self.counter = counter
        self.path = path
        self.idle_seconds = idle_seconds
        self._stopping = threading.Event()
        self._fd: int | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Opens the log, raising OSError (no such file, no permission) here rather than in the thread."""
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._follow, args=(self._fd,), name="kmsg-follower", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _follow(self, fd: int) -> None:
        partial = b""
        while not self._stopping.is_set():
            try:
                chunk = os.read(fd, _KMSG_READ_BYTES)
            except BlockingIOError:
                self.counter.caught_up.set()
                select.select([fd], [], [], self.idle_seconds)
                continue
            except BrokenPipeError:
                # Records were overwritten before this reader got to them; the next read
                # resumes at the oldest record still kept.
                continue
            if not chunk:
                # The end of a file, or a fifo with no writer.
                self.counter.caught_up.set()
                self._stopping.wait(self.idle_seconds)
                continue
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                self.counter.feed(line.decode("utf-8", "replace"))
