"""The host backend hashes the medium the node booted, once, in the background."""

from __future__ import annotations

import hashlib
import time

from agent.host.boot_medium import CHUNK_BYTES, BootMedium


def finished(medium: BootMedium) -> dict:
    deadline = time.monotonic() + 10
    while medium.hashing:
        assert time.monotonic() < deadline, "still hashing after 10 s"
        time.sleep(0.01)
    return medium.report()


def test_the_medium_is_hashed_whole_and_reported(tmp_path):
    image = tmp_path / "sr0"
    content = bytes(range(256)) * (CHUNK_BYTES // 256 * 3 + 7)  # several chunks and a remainder
    image.write_bytes(content)
    medium = BootMedium(str(image))
    assert medium.report() == {"boot_image_sha256": None, "boot_image_hashing": False}
    medium.start()
    assert finished(medium) == {"boot_image_sha256": hashlib.sha256(content).hexdigest(), "boot_image_hashing": False}


def test_an_unreadable_medium_reports_no_checksum_and_says_why(tmp_path):
    medium = BootMedium(str(tmp_path / "missing"))
    medium.start()
    assert finished(medium) == {"boot_image_sha256": None, "boot_image_hashing": False}
    assert medium.error.startswith(f"cannot read {tmp_path / 'missing'}: ")


def test_without_a_medium_configured_nothing_is_hashed():
    medium = BootMedium(None)
    medium.start()
    assert medium.report() == {"boot_image_sha256": None, "boot_image_hashing": False}
