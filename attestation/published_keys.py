"""The JWKS as the control plane publishes it to a process that holds no private key.

`manage.py export_signing_keys FILE` writes it where the signing keys are; the public listener
reads it (its settings' PUBLIC_JWKS_FILE) again whenever the file changes, so a rotation needs no
restart. Public keys only: a private member (`d`) makes the file unusable, not served."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path


class KeysNotPublished(Exception):
    """The JWKS file is missing or is not a JWKS of public keys."""


def write(path: str | Path, jwks: dict) -> None:
    """Replace the file at once (a reader sees the old file or the new, never half of one)."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(jwks, indent=2, sort_keys=True) + "\n")
    partial.chmod(0o644)
    os.replace(partial, path)


def read(path: str | Path) -> dict:
    try:
        stat = os.stat(path)
    except OSError as error:
        raise KeysNotPublished(f"{path}: {error.strerror} (manage.py export_signing_keys writes it)") from None
    return _read_version(str(path), (stat.st_ino, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=4)
def _read_version(path: str, version: tuple[int, int, int]) -> dict:
    try:
        jwks = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise KeysNotPublished(f"{path}: not a JWKS: {error}") from None
    keys = jwks.get("keys") if isinstance(jwks, dict) else None
    if not isinstance(keys, list) or not all(isinstance(key, dict) and "kid" in key for key in keys):
        raise KeysNotPublished(f"{path}: not a JWKS: no list of keys with ids")
    if any("d" in key for key in keys):
        raise KeysNotPublished(f"{path}: holds a private key: export the public keys only")
    return {"keys": keys}
