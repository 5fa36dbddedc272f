"""Virtual media as a BMC that caches what it is given: the image is fetched when it is inserted.

A later boot uses what was fetched, even once its URL is gone (the control plane deletes a node's
config-drive URL when the node is released). A medium is hashed as it streams in; one small
enough to be a config drive is also read as ISO 9660, and if it is cloud-init's NoCloud source
(volume label CIDATA) its documents are kept as text.
"""

from __future__ import annotations

import hashlib
import io

import aiohttp
import pycdlib
import yarl

FETCH_TIMEOUT_S = 5.0  # the control plane's Redfish calls time out after 10 s
MAX_MEDIUM_BYTES = 64 * 1024 * 1024
MAX_CONFIG_DRIVE_BYTES = 8 * 1024 * 1024  # a NoCloud drive is tens of KiB; anything larger is only hashed
CHUNK_BYTES = 64 * 1024
NOCLOUD_LABEL = "CIDATA"
# cloud-init's, and the node agent's credentials (gpu-agent.json) that the control plane puts beside them.
NOCLOUD_DOCUMENTS = ("meta-data", "user-data", "network-config", "gpu-agent.json")
ISO9660_MAGIC_AT = 32769  # "CD001" of the first volume descriptor, after the 32 KiB system area


class FetchFailed(Exception):
    pass


async def fetch(url: str) -> dict:
    """What the BMC records of the medium at `url`: {"sha256", "size", "documents"?}, or {"error"}.

    Errors leave the URL out: a config drive's URL is its only credential."""
    try:
        digest, size, head = await _download(url)
    except FetchFailed as failure:
        return {"error": str(failure)}
    fetched: dict = {"sha256": digest, "size": size}
    documents = read_nocloud(head) if size <= MAX_CONFIG_DRIVE_BYTES else None
    if documents is not None:
        fetched["documents"] = documents
    return fetched


async def _download(url: str) -> tuple[str, int, bytes]:
    """(sha256, size, the bytes if the medium is small enough to be a config drive)."""
    try:
        target = yarl.URL(url)
    except ValueError:
        raise FetchFailed("not a URL") from None
    if target.scheme not in ("http", "https") or not target.host:
        raise FetchFailed("not an http or https URL")
    digest, size, kept = hashlib.sha256(), 0, bytearray()
    try:
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session, session.get(target) as response:
            if response.status != 200:
                raise FetchFailed(f"HTTP {response.status} {response.reason or ''}".rstrip())
            if (response.content_length or 0) > MAX_MEDIUM_BYTES:
                raise FetchFailed(f"larger than {MAX_MEDIUM_BYTES} bytes")
            async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                size += len(chunk)
                if size > MAX_MEDIUM_BYTES:
                    raise FetchFailed(f"larger than {MAX_MEDIUM_BYTES} bytes")
                digest.update(chunk)
                if size <= MAX_CONFIG_DRIVE_BYTES:
                    kept += chunk
    except TimeoutError:
        raise FetchFailed(f"timed out after {FETCH_TIMEOUT_S:g} s") from None
    except aiohttp.ClientError as error:
        raise FetchFailed(str(error) or type(error).__name__) from None
    return digest.hexdigest(), size, bytes(kept)


def read_nocloud(data: bytes) -> dict[str, str] | None:
    """The documents of a NoCloud config drive (an ISO 9660 image labelled CIDATA), or None if it is not one."""
    if data[ISO9660_MAGIC_AT : ISO9660_MAGIC_AT + 5] != b"CD001":
        return None
    iso = pycdlib.PyCdlib()
    try:
        iso.open_fp(io.BytesIO(data))
    except Exception:  # pycdlib fails in many ways on a damaged image; every one means "not a config drive"
        return None
    try:
        if iso.pvd.volume_identifier.decode("ascii", "replace").strip().upper() != NOCLOUD_LABEL:
            return None
        return {name: text for name in NOCLOUD_DOCUMENTS if (text := _read_file(iso, name)) is not None}
    finally:
        iso.close()


def _read_file(iso: pycdlib.PyCdlib, name: str) -> str | None:
    """A file by its Rock Ridge or Joliet name, as Linux would show it; None if it is not there."""
    paths = []
    if iso.has_rock_ridge():
        paths.append({"rr_path": f"/{name}"})
    if iso.has_joliet():
        paths.append({"joliet_path": f"/{name}"})
    for path in paths:
        out = io.BytesIO()
        try:
            iso.get_file_from_iso_fp(out, **path)
        except Exception:  # absent, or damaged: try the other name
            continue
        return out.getvalue().decode("utf-8", "replace")
    return None
