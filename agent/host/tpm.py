"""The host's TPM 2.0: quotes by the node's attestation key (AK), and the measured-boot event log.

tpm2-tools talk to the TPM (TPM2TOOLS_TCTI names it); this module parses the firmware's event
log itself. The log is the binary TCG PC Client crypto-agile format (TCG PC Client Platform
Firmware Profile, "Event Logging"): a TCG_PCR_EVENT whose data is the Spec ID Event03 header,
naming each bank's digest size, then TCG_PCR_EVENT2 records, all little-endian. Only record
headers and digests matter for evidence and they have not changed since the format appeared,
whereas `tpm2_eventlog` decodes every event's data, changes its YAML between releases, and
cannot be fed bytes without a file; parsing here keeps the evidence independent of the
installed tools' version and lets a test feed any bytes.

The control plane's verifier knows boot components, not event types: every event it replays
must name a component its policy assigns to that PCR, and that component's reference values
must list the event's digest. So every event extended into a quoted PCR is named for the
component that PCR holds (bmcsim's PCR_OF): separators, EFI actions and GRUB's commands as
much as firmware volumes and boot applications. The reference values for a host are then
every digest its known-good boot puts into those PCRs. EV_NO_ACTION events are logged but
never extended, so they are left out, as are PCRs that are not quoted.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from agent.backend import Refused, Unavailable

DEFAULT_TCTI = "device:/dev/tpmrm0"
DEFAULT_AK_HANDLE = 0x81010002
DEFAULT_EVENT_LOG = Path("/sys/kernel/security/tpm0/binary_bios_measurements")
QUOTED_PCRS = (0, 4, 8, 9)
TOOL_TIMEOUT_SECONDS = 30.0
MAX_NONCE_BYTES = 64  # a quote's qualifyingData is a TPM2B_DATA: at most a SHA-512 digest
MAX_DESCRIPTION_CHARS = 200
PCR_COUNT = 24
PERSISTENT_HANDLES = range(0x81000000, 0x82000000)

# TPM 2.0 Library, Part 2.
TPM_ALG_SHA256 = 0x000B
SHA256_BYTES = 32

# TCG PC Client Platform Firmware Profile, event types.
EV_NO_ACTION = 0x00000003
EV_EFI_BOOT_SERVICES_APPLICATION = 0x80000003
EV_EFI_BOOT_SERVICES_DRIVER = 0x80000004
EV_EFI_RUNTIME_SERVICES_DRIVER = 0x80000005
EV_EFI_PLATFORM_FIRMWARE_BLOB2 = 0x8000000A
EVENT_TYPE_NAMES = {
    0x00000000: "EV_PREBOOT_CERT",
    0x00000001: "EV_POST_CODE",
    EV_NO_ACTION: "EV_NO_ACTION",
    0x00000004: "EV_SEPARATOR",
    0x00000005: "EV_ACTION",
    0x00000006: "EV_EVENT_TAG",
    0x00000007: "EV_S_CRTM_CONTENTS",
    0x00000008: "EV_S_CRTM_VERSION",
    0x00000009: "EV_CPU_MICROCODE",
    0x0000000A: "EV_PLATFORM_CONFIG_FLAGS",
    0x0000000B: "EV_TABLE_OF_DEVICES",
    0x0000000C: "EV_COMPACT_HASH",
    0x0000000D: "EV_IPL",
    0x0000000E: "EV_IPL_PARTITION_DATA",
    0x0000000F: "EV_NONHOST_CODE",
    0x00000010: "EV_NONHOST_CONFIG",
    0x00000011: "EV_NONHOST_INFO",
    0x00000012: "EV_OMIT_BOOT_DEVICE_EVENTS",
    0x80000001: "EV_EFI_VARIABLE_DRIVER_CONFIG",
    0x80000002: "EV_EFI_VARIABLE_BOOT",
    EV_EFI_BOOT_SERVICES_APPLICATION: "EV_EFI_BOOT_SERVICES_APPLICATION",
    EV_EFI_BOOT_SERVICES_DRIVER: "EV_EFI_BOOT_SERVICES_DRIVER",
    EV_EFI_RUNTIME_SERVICES_DRIVER: "EV_EFI_RUNTIME_SERVICES_DRIVER",
    0x80000006: "EV_EFI_GPT_EVENT",
    0x80000007: "EV_EFI_ACTION",
    0x80000008: "EV_EFI_PLATFORM_FIRMWARE_BLOB",
    0x80000009: "EV_EFI_HANDOFF_TABLES",
    EV_EFI_PLATFORM_FIRMWARE_BLOB2: "EV_EFI_PLATFORM_FIRMWARE_BLOB2",
    0x8000000B: "EV_EFI_HANDOFF_TABLES2",
    0x8000000C: "EV_EFI_VARIABLE_BOOT2",
    0x80000010: "EV_EFI_HCRTM_EVENT",
    0x800000E0: "EV_EFI_VARIABLE_AUTHORITY",
    0x800000E1: "EV_EFI_SPDM_FIRMWARE_BLOB",
    0x800000E2: "EV_EFI_SPDM_FIRMWARE_CONFIG",
}
IMAGE_LOAD_EVENTS = (EV_EFI_BOOT_SERVICES_APPLICATION, EV_EFI_BOOT_SERVICES_DRIVER, EV_EFI_RUNTIME_SERVICES_DRIVER)
SPEC_ID_SIGNATURE = b"Spec ID Event03\0"
LEGACY_DIGEST_BYTES = 20  # the SHA-1 digest of a TCG_PCR_EVENT, the header's own format
IMAGE_LOAD_DEVICE_PATH_OFFSET = 32  # UEFI_IMAGE_LOAD_EVENT: four UINT64s, then the device path
MEDIA_DEVICE_PATH, FILE_PATH_SUBTYPE, END_DEVICE_PATH = 0x04, 0x04, 0x7F

# The component each quoted PCR holds (bmcsim's PCR_OF); PCR 9 holds the initrd as well.
COMPONENT_OF_PCR = {0: "firmware", 4: "bootloader", 8: "cmdline", 9: "kernel"}
INITRD_COMPONENT = "initrd"
INITRD_NAMES = ("initrd", "initramfs")


class TPMError(Unavailable):
    """The TPM, its tools, the AK certificate or the event log cannot give evidence; says why."""


@dataclass(frozen=True)
class LogEvent:
    """One TCG_PCR_EVENT2 record."""

    pcr: int
    event_type: int
    digests: Mapping[int, bytes]  # TPM_ALG_ID -> digest
    data: bytes


@dataclass(frozen=True)
class TPMQuoter:
    """Quotes the boot PCRs with the node's AK and reads the event log that explains them."""

    ak_cert_path: Path  # PEM, issued by the manufacturer CA: CN = node name, serialNumber = node serial
    tcti: str = DEFAULT_TCTI
    ak: str = f"{DEFAULT_AK_HANDLE:#x}"  # a persistent handle, or a context file tpm2_createak wrote
    pcrs: tuple[int, ...] = QUOTED_PCRS  # of the SHA-256 bank
    event_log_path: Path = DEFAULT_EVENT_LOG
    timeout: float = TOOL_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if not self.pcrs or list(self.pcrs) != sorted(set(self.pcrs)) or not set(self.pcrs) <= set(range(PCR_COUNT)):
            raise ValueError(f"pcrs must be distinct PCR indexes from 0 to {PCR_COUNT - 1} in ascending order")

    def quote(self, nonce: bytes) -> dict:
        """{"attest": base64 TPMS_ATTEST, "signature": base64 TPMT_SIGNATURE, "ak_cert": PEM} over `nonce`."""
        if not 0 < len(nonce) <= MAX_NONCE_BYTES:
            raise Refused(f"a nonce is 1 to {MAX_NONCE_BYTES} bytes, not {len(nonce)}", status=400)
        ak_cert = self._ak_cert()
        tools = _Tools(self.tcti, self.timeout)
        # A fresh directory, because tpm2_quote reads -q as a file when a file of that name exists.
        with tempfile.TemporaryDirectory(prefix="gpu-agent-quote-") as work:
            tools.run(
                "tpm2_quote", "-c", self.ak, "-l", f"sha256:{','.join(map(str, self.pcrs))}", "-q", nonce.hex(),
                "-g", "sha256", "-m", "attest.bin", "-s", "signature.bin",
                cwd=work,
            )  # fmt: skip
            attest = Path(work, "attest.bin").read_bytes()
            signature = Path(work, "signature.bin").read_bytes()
        if not _is_handle(self.ak):
            tools.release_transients()  # loading the context file left the AK in the TPM
        return {
            "attest": base64.b64encode(attest).decode(),
            "signature": base64.b64encode(signature).decode(),
            "ak_cert": ak_cert,
        }

    def event_log(self) -> list[dict]:
        """The quoted PCRs' events, {"pcr", "digest" (SHA-256 hex), "component", "description"}, in log order."""
        path = self.event_log_path
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            raise TPMError(
                f"no measured-boot event log at {path}: the firmware did not hand one over, or securityfs is not"
                " mounted"
            ) from None
        except OSError as err:
            raise TPMError(f"cannot read the measured-boot event log {path}: {err.strerror}") from None
        try:
            events = parse_event_log(blob)
        except ValueError as err:
            raise TPMError(f"{path} is not a TCG crypto-agile event log: {err}") from None
        entries = []
        for position, event in enumerate(events, start=1):  # numbered as tpm2_eventlog numbers them
            if event.pcr not in self.pcrs or event.event_type == EV_NO_ACTION:
                continue
            digest = event.digests.get(TPM_ALG_SHA256)
            if digest is None:
                raise TPMError(f"{path}: event {position} (PCR {event.pcr}) has no SHA-256 digest to replay")
            entries.append(
                {
                    "pcr": event.pcr,
                    "digest": digest.hex(),
                    "component": _component(event),
                    "description": _description(event),
                }
            )
        return entries

    def _ak_cert(self) -> str:
        try:
            pem = self.ak_cert_path.read_text()
            x509.load_pem_x509_certificate(pem.encode())
        except OSError as err:
            raise TPMError(f"cannot read the AK certificate {self.ak_cert_path}: {err.strerror}") from None
        except ValueError as err:
            raise TPMError(f"{self.ak_cert_path} is not a PEM certificate: {err}") from None
        return pem


def create_attestation_key(*, tcti: str = DEFAULT_TCTI, handle: int = DEFAULT_AK_HANDLE) -> str:
    """Create the node's AK (ECDSA P-256, SHA-256) under its RSA EK, persist it at `handle`; its public key PEM.

    Run once, at install: the manufacturer CA certifies that public key as the node's AK. A
    handle that already holds an object is refused rather than replaced, since replacing it
    would orphan the certificate issued for the AK there.
    """
    if handle not in PERSISTENT_HANDLES:
        raise ValueError(f"{handle:#x} is not a persistent handle (0x81000000 to 0x81ffffff)")
    tools = _Tools(tcti, TOOL_TIMEOUT_SECONDS)
    occupied = {int(h, 16) for h in re.findall(r"0x[0-9a-fA-F]+", tools.run("tpm2_getcap", "handles-persistent"))}
    if handle in occupied:
        raise TPMError(
            f"persistent handle {handle:#x} already holds an object; read its public key with"
            f" `tpm2_readpublic -c {handle:#x} -f pem -o ak.pem`, or choose another handle"
        )
    with tempfile.TemporaryDirectory(prefix="gpu-agent-ak-") as work:
        # RSA: the EK type nearly every TPM ships a certificate for, which a CA proving the AK is this TPM's
        # (credential activation) starts from.
        tools.run("tpm2_createek", "-c", "ek.ctx", "-G", "rsa", cwd=work)
        tools.release_transients()
        tools.run(
            "tpm2_createak", "-C", "ek.ctx", "-c", "ak.ctx", "-G", "ecc", "-g", "sha256", "-s", "ecdsa",
            "-u", "ak.pem", "-f", "pem",
            cwd=work,
        )  # fmt: skip
        tools.release_transients()
        tools.run("tpm2_evictcontrol", "-C", "o", "-c", "ak.ctx", f"{handle:#x}", cwd=work)
        tools.release_transients()
        return Path(work, "ak.pem").read_text()


@dataclass(frozen=True)
class _Tools:
    tcti: str
    timeout: float

    def run(self, tool: str, *args: str, cwd: str | None = None) -> str:
        try:
            result = subprocess.run(
                [tool, *args],
                cwd=cwd,
                env={**os.environ, "TPM2TOOLS_TCTI": self.tcti},
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout,
            )
        except FileNotFoundError:
            raise TPMError(f"{tool} is not installed: install tpm2-tools") from None
        except subprocess.TimeoutExpired:
            raise TPMError(f"{tool} did not finish within {self.timeout:g} s (TCTI {self.tcti})") from None
        if result.returncode != 0:
            raise TPMError(f"{tool} failed (exit {result.returncode}, TCTI {self.tcti}): {result.stderr.strip()}")
        return result.stdout

    def release_transients(self) -> None:
        """Flush transient objects, which a resource manager does itself and a bare TPM keeps until reset."""
        if not _resource_managed(self.tcti):
            self.run("tpm2_flushcontext", "-t")


def _resource_managed(tcti: str) -> bool:
    name, _, config = tcti.partition(":")
    return name in ("tabrmd", "abrmd") or (name == "device" and config.startswith("/dev/tpmrm"))


def _is_handle(ak: str) -> bool:
    try:
        int(ak, 0)
    except ValueError:
        return False
    return True


# The event log.


class _LogReader:
    """Little-endian reader of the event log's structures."""

    def __init__(self, data: bytes, offset: int = 0):
        self.data, self.offset = data, offset

    @property
    def remaining(self) -> int:
        return len(self.data) - self.offset

    def take(self, size: int) -> bytes:
        if size > self.remaining:
            raise ValueError(f"byte {self.offset} starts a field of {size} bytes but only {self.remaining} follow")
        self.offset += size
        return self.data[self.offset - size : self.offset]

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "little")


def parse_event_log(data: bytes) -> list[LogEvent]:
    """The TCG_PCR_EVENT2 records after the Spec ID header; ValueError saying where the bytes stop making sense."""
    reader = _LogReader(data)
    digest_sizes = _spec_id_digest_sizes(reader)
    events = []
    while reader.remaining:
        start = reader.offset
        pcr, event_type, count = reader.uint(4), reader.uint(4), reader.uint(4)
        if not 0 < count <= len(digest_sizes):
            raise ValueError(
                f"the event at byte {start} carries {count} digests; the header declares {len(digest_sizes)} banks"
            )
        digests = {}
        for _ in range(count):
            algorithm = reader.uint(2)
            if algorithm not in digest_sizes:
                raise ValueError(f"the event at byte {start} has a digest of algorithm {algorithm:#06x}, no bank")
            digests[algorithm] = reader.take(digest_sizes[algorithm])
        events.append(LogEvent(pcr, event_type, digests, reader.take(reader.uint(4))))
    return events


def _spec_id_digest_sizes(reader: _LogReader) -> dict[int, int]:
    """The digest size of each bank, from the TCG_EfiSpecIDEventStruct the log starts with."""
    _pcr, event_type = reader.uint(4), reader.uint(4)
    reader.take(LEGACY_DIGEST_BYTES)
    size = reader.uint(4)
    signature = reader.data[reader.offset : reader.offset + len(SPEC_ID_SIGNATURE)]
    if event_type != EV_NO_ACTION or signature != SPEC_ID_SIGNATURE:
        raise ValueError("it does not start with a Spec ID Event03 header (a SHA-1-only log, or no event log)")
    header = _LogReader(reader.take(size))
    header.take(len(SPEC_ID_SIGNATURE))
    header.take(8)  # platformClass, specVersionMinor, specVersionMajor, specErrata, uintnSize
    sizes = {}
    for _ in range(header.uint(4)):
        algorithm = header.uint(2)
        sizes[algorithm] = header.uint(2)
    header.take(header.uint(1))  # vendorInfo
    if sizes.get(TPM_ALG_SHA256) != SHA256_BYTES:
        raise ValueError("its header declares no SHA-256 bank")
    return sizes


def _component(event: LogEvent) -> str:
    if event.pcr == 9 and any(name in _file_name(_text(event.data)).lower() for name in INITRD_NAMES):
        return INITRD_COMPONENT
    # A PCR no boot component is assigned to gets a name a policy can still assign it by.
    return COMPONENT_OF_PCR.get(event.pcr, f"pcr{event.pcr}")


def _description(event: LogEvent) -> str:
    name = EVENT_TYPE_NAMES.get(event.event_type, f"event type {event.event_type:#x}")
    if event.event_type == EV_EFI_PLATFORM_FIRMWARE_BLOB2 and event.data:
        detail = _text(event.data[1 : 1 + event.data[0]])  # UEFI_PLATFORM_FIRMWARE_BLOB2: sized description first
    elif event.event_type in IMAGE_LOAD_EVENTS:
        detail = _image_file_path(event.data)
    else:
        detail = _text(event.data)
    return f"{name} {detail}"[:MAX_DESCRIPTION_CHARS] if detail else name


def _text(data: bytes) -> str:
    """The event data as text if it is printable ASCII, in bytes or UCS-2 (as UEFI writes strings); else ""."""
    for encoding in ("ascii", "utf-16-le"):
        try:
            text = data.decode(encoding).rstrip("\0")
        except UnicodeDecodeError:
            continue
        if text.isascii() and text.isprintable():
            return text
    return ""


def _file_name(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


def _image_file_path(data: bytes) -> str:
    """The file path nodes of a UEFI_IMAGE_LOAD_EVENT's device path, e.g. \\EFI\\ubuntu\\shimx64.efi."""
    reader = _LogReader(data[:IMAGE_LOAD_DEVICE_PATH_OFFSET])
    try:
        reader.take(24)  # ImageLocationInMemory, ImageLengthInMemory, ImageLinkTimeAddress
        end = IMAGE_LOAD_DEVICE_PATH_OFFSET + reader.uint(8)
        reader = _LogReader(data[:end], IMAGE_LOAD_DEVICE_PATH_OFFSET)
        parts = []
        while reader.remaining:
            node_type, subtype, length = reader.uint(1), reader.uint(1), reader.uint(2)
            if node_type == END_DEVICE_PATH or length < 4:
                break
            body = reader.take(length - 4)
            if (node_type, subtype) == (MEDIA_DEVICE_PATH, FILE_PATH_SUBTYPE):
                parts.append(_text(body))
    except ValueError:  # a device path we cannot walk only costs the description its detail
        return ""
    return "".join(parts)
