"""The measured-boot event log: its events parsed, and how firmware measures Secure Boot's state."""

from __future__ import annotations

import hashlib
import struct
import uuid

from attestation.verifier.fields import MAX_EVENTS, hex_bytes, name_text
from core import validation

PCR_COUNT = 24
ZERO_PCR = bytes(32)
PCR_INDEX = f"a PCR index from 0 to {PCR_COUNT - 1}"

Event = tuple[int, bytes, str]  # PCR index, SHA-256 digest, component

# UEFI Secure Boot's state as firmware measures it into PCR 7 (TCG PC Client Platform Firmware
# Profile): an EV_EFI_VARIABLE_DRIVER_CONFIG event whose digest is SHA-256 of the SecureBoot
# variable's UEFI_VARIABLE_DATA, that is the EFI global-variable GUID, the lengths of the name (in
# characters) and of the data, the name in UCS-2, then the value: 01 enabled, 00 disabled.
SECURE_BOOT_COMPONENT = "secureboot"
_SECURE_BOOT_VARIABLE = (
    uuid.UUID("8be4df61-93ca-11d2-aa0d-00e098032b8c").bytes_le
    + struct.pack("<QQ", len("SecureBoot"), 1)
    + "SecureBoot".encode("utf-16-le")
)
SECURE_BOOT_MEASURED = {
    hashlib.sha256(_SECURE_BOOT_VARIABLE + b"\x01").digest(): "Enabled",
    hashlib.sha256(_SECURE_BOOT_VARIABLE + b"\x00").digest(): "Disabled",
}


def parse_event_log(document: object) -> list[Event]:
    """Raises validation.Invalid, naming the place, for an event off its shape."""
    events = []
    for position, event in enumerate(validation.sequence(document, "event_log", max_items=MAX_EVENTS)):
        where = f"event_log[{position}]"
        entry = validation.mapping(event, where, expected="an object with pcr, digest and component")
        pcr = validation.integer(entry.get("pcr"), f"{where}.pcr", minimum=0, maximum=PCR_COUNT - 1, expected=PCR_INDEX)
        digest = hex_bytes(entry.get("digest"), f"{where}.digest", 32)
        component = name_text(entry.get("component"), f"{where}.component")
        events.append((pcr, digest, component))
    return events
