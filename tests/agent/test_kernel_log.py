"""The kernel-log XID source: real NVRM lines of several driver generations, /dev/kmsg records
replayed, forged and foreign XIDs, and the follower reading a file and a fifo."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from agent.backend import GPU
from agent.host.kernel_log import KmsgFollower, XidCounter, normalise_pci_bus_id, parse_xid

DATA = Path(__file__).resolve().parent.parent / "data" / "agent"


def data_lines(name: str) -> list[str]:
    return [line for line in (DATA / name).read_text().splitlines() if not line.startswith("#")]


XID_LINES = [tuple(line.split("\t")) for line in data_lines("nvrm_xid_lines.tsv")]
# The node the kmsg_records.txt records are read on.
NODE_GPUS = [
    GPU(index=0, uuid="GPU-760d0170-b7c5-6817-9414-6cc7112645de", model="NVIDIA A100", pci_bus_id="00000000:0A:00.0"),
    GPU(index=1, uuid="GPU-00000000-0000-0000-0000-000000000001", model="NVIDIA A100", pci_bus_id="00000000:CB:00.0"),
]
KMSG_COUNTS = {0: {31: 1, 62: 1, 45: 2}, 1: {109: 1}}


def kmsg(sequence: int, message: str, priority: int = 4) -> str:
    return f"{priority},{sequence},{sequence * 1000},-;{message}"


@pytest.mark.parametrize(("pci_bus_id", "xid", "line"), XID_LINES, ids=[line[2][:60] for line in XID_LINES])
def test_every_driver_generation_line_is_parsed(pci_bus_id, xid, line):
    assert parse_xid(line) == (pci_bus_id, int(xid))


def test_the_test_data_covers_the_formats_that_differ():
    lines = [line for _, _, line in XID_LINES]
    assert any("Xid (0000:" in line for line in lines)  # no "PCI:" prefix
    assert any("pid='<unknown>'" in line for line in lines)
    assert any(line.startswith("[") for line in lines)  # dmesg timestamps
    assert any(" kernel: NVRM" in line for line in lines)  # journal short format
    assert any(line.startswith("NVRM:") for line in lines)  # bare kmsg messages
    assert any(not pci.startswith("00000000") for pci, _, _ in XID_LINES)  # a PCI domain other than 0


@pytest.mark.parametrize("line", data_lines("not_xid_lines.txt"))
def test_lines_that_are_not_xids_are_not_parsed(line):
    assert parse_xid(line) is None


def test_an_xid_that_names_an_earlier_one_is_its_own():
    assert parse_xid("NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001 caused by previous Xid 149") == (
        "00000000:DC:00.0",
        45,
    )


@pytest.mark.parametrize(
    ("address", "normalised"),
    [
        ("PCI:0000:18:00", "00000000:18:00.0"),
        ("0000:cb:00", "00000000:CB:00.0"),
        ("PCI:0019:01:00", "00000019:01:00.0"),
        ("00000000:18:00.0", "00000000:18:00.0"),
        ("00000000:cb:00.0", "00000000:CB:00.0"),
        ("0000:18:00.1", "00000000:18:00.1"),
        ("0:3:0", "00000000:03:00.0"),
    ],
)
def test_pci_addresses_are_normalised_to_nvml_form(address, normalised):
    assert normalise_pci_bus_id(address) == normalised


@pytest.mark.parametrize(
    "address", ["", "GPU-760d0170", "0000:18", "0000:18:00:00", "000000000:18:00.0", "0000:18:00.9"]
)
def test_what_is_no_pci_address_is_refused(address):
    with pytest.raises(ValueError, match="not a PCI address"):
        normalise_pci_bus_id(address)


def test_lines_of_any_format_are_counted_per_gpu_and_xid():
    counter = XidCounter(NODE_GPUS)
    for line in (
        "[14370.688139] NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>', name=<unknown>, Ch 00000008",
        "Dec 01 10:00:00 gpu-node kernel: NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>', name=<unknown>, Ch 00000009",
        kmsg(7, "NVRM: Xid (PCI:0000:0a:00): 31, pid=13332, name=cuda_plot_k32_v, Ch 00000010, intr 00000000."),
        "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008",
    ):
        counter.feed(line)
    assert counter.counts() == {0: {45: 2, 31: 1}, 1: {109: 1}}
    assert counter.last() == {0: 31, 1: 109}


def test_the_same_kmsg_record_twice_counts_once():
    counter = XidCounter(NODE_GPUS)
    record = kmsg(1204, "NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>', name=<unknown>, Ch 00000008")
    counter.feed(record)
    counter.feed(record)
    assert counter.counts() == {0: {45: 1}}


def test_two_records_of_the_same_xid_count_twice():
    counter = XidCounter(NODE_GPUS)
    message = "NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>', name=<unknown>, Ch 00000008"
    counter.feed(kmsg(1204, message))
    counter.feed(kmsg(1205, message))
    assert counter.counts() == {0: {45: 2}}


def test_replaying_the_ring_buffer_counts_nothing_twice():
    counter = XidCounter(NODE_GPUS)
    records = data_lines("kmsg_records.txt")
    for _ in range(3):
        for record in records:
            counter.feed(record)
    assert counter.counts() == KMSG_COUNTS
    assert counter.last() == {0: 45, 1: 109}


def test_a_record_read_with_its_continuation_lines_is_still_one_record():
    counter = XidCounter(NODE_GPUS)
    record = kmsg(9, "NVRM: Xid (PCI:0000:0a:00): 79, GPU has fallen off the bus.") + "\n SUBSYSTEM=pci\n"
    counter.feed(record)
    counter.feed(record)
    counter.feed(" DEVICE=+pci:0000:0a:00.0")
    assert counter.counts() == {0: {79: 1}}


def test_a_record_written_to_kmsg_by_a_program_is_not_counted():
    counter = XidCounter(NODE_GPUS)
    # Facility 1 (user) and priority 4: what a write of "<12>..." to /dev/kmsg becomes.
    counter.feed(kmsg(10, "NVRM: Xid (PCI:0000:0a:00): 79, GPU has fallen off the bus.", priority=12))
    assert counter.counts() == {}


def test_garbage_is_ignored():
    counter = XidCounter(NODE_GPUS)
    for line in [*data_lines("not_xid_lines.txt"), "", "\x00\xff", "4,x,0,-;NVRM: Xid", ";;;", "6,12;no timestamp"]:
        counter.feed(line)
    assert counter.counts() == {}
    assert counter.last() == {}
    assert counter.xids_of_unknown_gpus == 0


def test_xids_of_gpus_the_node_does_not_have_are_counted_apart():
    counter = XidCounter(NODE_GPUS)
    counter.feed("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.")
    counter.feed(kmsg(3, "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)"))
    assert counter.counts() == {}
    assert counter.xids_of_unknown_gpus == 2


def test_a_gpu_written_in_another_pci_form_is_still_found():
    counter = XidCounter([GPU(index=3, uuid="GPU-3", model="NVIDIA H100", pci_bus_id="00000000:cb:00.0")])
    counter.feed("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception")
    assert counter.counts() == {3: {13: 1}}


def test_xids_from_another_source_are_added():
    counter = XidCounter(NODE_GPUS)
    counter.add(1, 48)
    counter.add(1, 48)
    assert counter.counts() == {1: {48: 2}}
    assert counter.last() == {1: 48}


def test_counts_handed_out_do_not_change_the_counter():
    counter = XidCounter(NODE_GPUS)
    counter.add(0, 13)
    counts = counter.counts()
    counts[0][13] = 1000
    counter.last()[0] = 79
    assert counter.counts() == {0: {13: 1}}
    assert counter.last() == {0: 13}


def test_feeding_from_many_threads_loses_nothing():
    counter = XidCounter(NODE_GPUS)
    line = "[1.0] NVRM: Xid (PCI:0000:0a:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception"

    def feed() -> None:
        for _ in range(500):
            counter.feed(line)

    threads = [threading.Thread(target=feed) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.counts() == {0: {13: 4000}}


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def follower_factory():
    followers = []

    def make(counter: XidCounter, path: Path) -> KmsgFollower:
        follower = KmsgFollower(counter, str(path), idle_seconds=0.05)
        followers.append(follower)
        follower.start()
        return follower

    yield make
    for follower in followers:
        follower.stop()


def test_the_follower_reads_a_file_and_what_is_appended_to_it(tmp_path, follower_factory):
    log = tmp_path / "kmsg"
    log.write_text((DATA / "kmsg_records.txt").read_text() * 2)
    counter = XidCounter(NODE_GPUS)
    follower_factory(counter, log)
    wait_for(lambda: counter.counts() == KMSG_COUNTS)
    assert counter.xids_of_unknown_gpus == 1
    with log.open("a") as appending:
        appending.write(
            kmsg(1300, "NVRM: Xid (PCI:0000:cb:00): 94, pid=1234, name=python3, Contained ECC error") + "\n"
        )
    wait_for(lambda: counter.counts()[1] == {109: 1, 94: 1})
    assert counter.last() == {0: 45, 1: 94}


def test_the_counter_is_caught_up_only_once_the_follower_has_read_what_the_log_held_at_start(
    tmp_path, follower_factory
):
    """The push reporter takes its baseline once caught up, so XIDs from before the agent started are no news."""
    log = tmp_path / "kmsg"
    log.write_text("".join(kmsg(n, f"usb 1-1: new device number {n}", priority=6) + "\n" for n in range(1, 20_001)))
    with log.open("a") as appending:
        appending.write(kmsg(20_001, "NVRM: Xid (PCI:0000:0a:00): 79, GPU has fallen off the bus.") + "\n")
    counter = XidCounter(NODE_GPUS)
    assert not counter.caught_up.is_set()
    follower_factory(counter, log)
    assert counter.caught_up.wait(timeout=10)
    assert counter.counts() == {0: {79: 1}}


def test_the_follower_reads_a_fifo_written_in_pieces(tmp_path, follower_factory):
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    counter = XidCounter(NODE_GPUS)
    follower_factory(counter, fifo)
    stream = (DATA / "kmsg_records.txt").read_bytes()
    with fifo.open("wb", buffering=0) as writer:
        # Records cut mid-line, as a writer's pieces may arrive.
        for start in range(0, len(stream), 37):
            writer.write(stream[start : start + 37])
            time.sleep(0.001)
        writer.write(stream)
        wait_for(lambda: counter.counts() == KMSG_COUNTS)
    # The writer has gone: the follower waits for the next one.
    with fifo.open("wb", buffering=0) as writer:
        writer.write((kmsg(1400, "NVRM: Xid (PCI:0000:0a:00): 79, GPU has fallen off the bus.") + "\n").encode())
        wait_for(lambda: counter.counts()[0].get(79) == 1)
    assert counter.counts() == {0: {31: 1, 62: 1, 45: 2, 79: 1}, 1: {109: 1}}


def test_the_follower_stops(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("")
    follower = KmsgFollower(XidCounter(NODE_GPUS), str(log), idle_seconds=0.05)
    follower.start()
    follower.stop()
    assert not any(thread.name == "kmsg-follower" for thread in threading.enumerate())


def test_a_log_that_cannot_be_opened_fails_at_start(tmp_path):
    follower = KmsgFollower(XidCounter(NODE_GPUS), str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError):
        follower.start()
