"""The checksum of the medium the node booted: the virtual CD its tenant image came on, which
the control plane compares with the image catalogue's.

Hashing gigabytes read through a BMC takes minutes, so it runs once per boot in a thread of its
own, started with the agent; until it is done the inventory says it is under way.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

log = logging.getLogger("gpu-agent")
CHUNK_BYTES = 1024 * 1024


class BootMedium:
    def __init__(self, path: str | None):
        self.path = path
        self.sha256: str | None = None
        self.hashing = False
        self.error = ""

    def start(self) -> None:
        if self.path:
            self.hashing = True
            threading.Thread(target=self._hash, args=(self.path,), name="boot-medium", daemon=True).start()

    def _hash(self, path: str) -> None:
        digest = hashlib.sha256()
        try:
            with Path(path).open("rb") as medium:
                while chunk := medium.read(CHUNK_BYTES):
                    digest.update(chunk)
            self.sha256 = digest.hexdigest()
        except OSError as error:
            self.error = f"cannot read {path}: {error.strerror}"
            log.warning("boot medium: %s", self.error)
        finally:
            self.hashing = False

    def report(self) -> dict:
        """What the inventory says of it: {"boot_image_sha256", "boot_image_hashing"}."""
        return {"boot_image_sha256": self.sha256, "boot_image_hashing": self.hashing}
