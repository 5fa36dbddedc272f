"""The sample OS images bmcsim serves, for the control plane's image catalogue and its nodes' virtual CD.

Each is a few KiB of deterministic bytes, not a bootable ISO: what a simulated node needs of an OS
image is its sha256 (what the node reports it booted) and which OS it is (what its console prints).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

IMAGE_BYTES = 4096


@dataclass(frozen=True)
class SampleImage:
    name: str  # a slug, as the control plane's catalogue names images
    os: str
    pretty_name: str  # as /etc/os-release says it, for the console's login banner
    kernel: str
    default: bool = False

    @property
    def file(self) -> str:
        return f"{self.name}.img"


IMAGES = (
    SampleImage("ubuntu-24-04", "ubuntu-24.04", "Ubuntu 24.04.1 LTS", "6.8.0-45-generic", default=True),
    SampleImage("rocky-9", "rocky-9", "Rocky Linux 9.4 (Blue Onyx)", "5.14.0-427.13.1.el9_4.x86_64"),
    SampleImage("debian-12", "debian-12", "Debian GNU/Linux 12 (bookworm)", "6.1.0-25-amd64"),
)


@functools.cache
def image_bytes(image: SampleImage) -> bytes:
    header = f"bmcsim sample OS image\nname: {image.name}\nos: {image.os}\n".encode()
    return header + hashlib.shake_256(f"bmcsim/image/{image.name}".encode()).digest(IMAGE_BYTES - len(header))


@functools.cache
def sha256(image: SampleImage) -> str:
    return hashlib.sha256(image_bytes(image)).hexdigest()


def by_file(file: str) -> SampleImage | None:
    return next((image for image in IMAGES if image.file == file), None)


def by_sha256(digest: str) -> SampleImage | None:
    return next((image for image in IMAGES if sha256(image) == digest), None)


def listing(base_url: str) -> list[dict]:
    return [
        {
            "name": image.name,
            "os": image.os,
            "url": f"{base_url}/bmcsim/v1/images/{image.file}",
            "sha256": sha256(image),
            "default": image.default,
        }
        for image in IMAGES
    ]
