"""An image catalogue as a vendor or bmcsim publishes it, as plain records.

Pure: no Django. `{"images": [{"name", "os", "url", "sha256", "default"?, "boot_mode"?,
"needs_secure_boot"?}]}`; anything malformed raises core.validation.Invalid naming the entry
and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core import validation

NAME = re.compile(r"[-a-zA-Z0-9_]{1,64}")
SHA256 = re.compile(r"[0-9a-f]{64}")
URL = re.compile(r"https?://[^\s]{1,490}")
BOOT_MODES = ("UEFI", "Legacy")


@dataclass(frozen=True)
class ImageRecord:
    name: str
    os: str
    url: str
    sha256: str
    default: bool
    boot_mode: str
    needs_secure_boot: bool


def parse_catalogue(document: object) -> list[ImageRecord]:
    entries = validation.sequence(validation.mapping(document, "").get("images"), "images", max_items=1000)
    records = []
    for number, entry in enumerate(entries):
        where = validation.at("images", number)
        entry = validation.mapping(entry, where)
        records.append(
            ImageRecord(
                name=validation.matches(
                    entry.get("name"), validation.at(where, "name"), NAME, "a slug of letters, digits, - and _"
                ),
                os=validation.text(entry.get("os"), validation.at(where, "os"), max_length=64),
                url=validation.matches(entry.get("url"), validation.at(where, "url"), URL, "an http(s) URL"),
                sha256=validation.matches(
                    entry.get("sha256"), validation.at(where, "sha256"), SHA256, "64 lower-case hex digits"
                ),
                default=validation.one_of(entry.get("default", False), validation.at(where, "default"), (True, False)),
                boot_mode=validation.one_of(
                    entry.get("boot_mode", "UEFI"), validation.at(where, "boot_mode"), BOOT_MODES
                ),
                needs_secure_boot=validation.one_of(
                    entry.get("needs_secure_boot", False), validation.at(where, "needs_secure_boot"), (True, False)
                ),
            )
        )
    if sum(r.default for r in records) > 1:
        raise validation.Invalid("images", "at most one image may be the default")
    return records
