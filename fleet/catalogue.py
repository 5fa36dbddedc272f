"""An image catalogue as a vendor or bmcsim publishes it, as plain records.

Pure: no Django. `{"images": [{"name", "os", "url", "sha256", "default"?, "boot_mode"?,
"needs_secure_boot"?}]}`; anything malformed raises core.validation.Invalid naming the entry
and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core import validation as v

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
    entries = v.sequence(v.mapping(document, "").get("images"), "images", max_items=1000)
    records = []
    for number, entry in enumerate(entries):
        where = v.at("images", number)
        entry = v.mapping(entry, where)
        records.append(
            ImageRecord(
                name=v.matches(entry.get("name"), v.at(where, "name"), NAME, "a slug of letters, digits, - and _"),
                os=v.text(entry.get("os"), v.at(where, "os"), max_length=64),
                url=v.matches(entry.get("url"), v.at(where, "url"), URL, "an http(s) URL"),
                sha256=v.matches(entry.get("sha256"), v.at(where, "sha256"), SHA256, "64 lower-case hex digits"),
                default=v.one_of(entry.get("default", False), v.at(where, "default"), (True, False)),
                boot_mode=v.one_of(entry.get("boot_mode", "UEFI"), v.at(where, "boot_mode"), BOOT_MODES),
                needs_secure_boot=v.one_of(
                    entry.get("needs_secure_boot", False), v.at(where, "needs_secure_boot"), (True, False)
                ),
            )
        )
    if sum(r.default for r in records) > 1:
        raise v.Invalid("images", "at most one image may be the default")
    return records
