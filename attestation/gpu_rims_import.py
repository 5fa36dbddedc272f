"""NVIDIA's reference integrity manifests (RIMs) as reference values: imported only when NVIDIA
signed them (attestation/verifier/gpu_rims.py, against the imported RIM root), kept as signed, one
per driver or VBIOS release, and retired like other releases."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from attestation import verifier
from attestation.models import GpuRim, TrustAnchor, TrustAnchorRole
from attestation.verifier.fields import MAX_RIM_BYTES
from attestation.verifier.gpu_rims import DRIVER, Rim, read_rim, verify_rim
from core import clock, outbound, validation

# NVIDIA names a VBIOS RIM after the board (project, SKU, chip SKU) and the version, none of which
# but the version is inside it: NV_GPU_VBIOS_1010_0200_882_96005E0001, or as nvtrust's sample
# file, 1010_0200_882_96005E0001_PROD.swidtag.
VBIOS_FILE_NAME = re.compile(r"(?:NV_GPU_VBIOS_)?([0-9]{4}_[0-9]{4}_[0-9]{3})_([0-9A-Fa-f]{10})(?![0-9A-Za-z])")


class RimRefused(ValueError):
    """A RIM not imported; the message names the file and why."""


@dataclass(frozen=True)
class RimDocument:
    name: str  # the file's name, or the URL's last segment: NVIDIA's RIM id is in it
    xml: bytes


def root(role: TrustAnchorRole) -> x509.Certificate:
    """The imported anchor of `role` (an NVIDIA root); ValueError saying how to import it (or
    verifier.UnusableAnchor, one, for an anchor no chain can end at)."""
    pem = TrustAnchor.objects.filter(role=role).values_list("pem", flat=True).first()
    if pem is None:
        raise ValueError(f"trust anchor {role} not imported (manage.py import_trust_anchors)")
    return _loaded(role, pem)


@functools.lru_cache(maxsize=4)
def _loaded(role: str, pem: str) -> x509.Certificate:
    """Loaded once per process for each anchor's text: every inspection asks for both roots."""
    return verifier.load_trust_anchor(role, pem)


def rim_id(name: str, rim: Rim) -> str:
    """NVIDIA's id of the RIM: a driver's from the RIM itself, a VBIOS's from its file's name,
    whose version must be the RIM's. ValueError where the name does not tell it."""
    if rim.component == DRIVER:
        return f"NV_GPU_DRIVER_{rim.chip}_{rim.version}"
    match = VBIOS_FILE_NAME.search(name)
    if match is None:
        raise ValueError(
            "a VBIOS RIM's file must be named as NVIDIA's: NV_GPU_VBIOS_<project>_<sku>_<chip sku>_<version>"
        )
    board, version = match.groups()
    if version.lower() != rim.version.replace(".", ""):
        raise ValueError(f"its name says VBIOS {version}, the RIM says {rim.version}")
    return f"NV_GPU_VBIOS_{board}_{version.upper()}"


@transaction.atomic
def import_gpu_rims(documents: Iterable[RimDocument], *, at: datetime | None = None) -> dict[str, str]:
    """Import each RIM NVIDIA signed (valid at `at`, None: core.clock's now) as its release's
    reference values: {rim_id: "imported" or "unchanged"}. RimRefused for the first that is not
    signed, not of a known release or another document under an imported id that still verifies
    (one that no longer does, kept from under a RIM root since replaced, is replaced); nothing is
    then imported."""
    at = at or clock.now()
    rim_root = root(TrustAnchorRole.NVIDIA_RIM_ROOT)
    outcome = {}
    for document in documents:
        try:
            identity, created = _import(document, rim_root, at)
        except ValueError as error:
            raise RimRefused(f"{document.name}: {error}") from error
        outcome[identity] = "imported" if created else "unchanged"
    return outcome


def _import(document: RimDocument, rim_root: x509.Certificate, at: datetime) -> tuple[str, bool]:
    failures = verify_rim(document.xml, root=rim_root, at=at)
    if failures:
        raise ValueError("not a RIM NVIDIA signed: " + "; ".join(failures))
    try:
        rim = read_rim(document.xml)
        xml = document.xml.decode("utf-8")
    except (validation.Invalid, UnicodeDecodeError) as error:
        raise ValueError(str(error)) from error
    identity = rim_id(document.name, rim)
    sha384 = hashlib.sha384(document.xml).hexdigest()
    fields = {
        "component": rim.component,
        "version": rim.version,
        "chip": rim.chip,
        "tag_id": rim.tag_id,
        "valid_from": rim.valid_from,
        "valid_until": rim.valid_until,
        "golden": {
            str(index): list(golden.alternatives) for index, golden in sorted(rim.golden.items()) if golden.active
        },
        "xml": xml,
        "sha384": sha384,
    }
    row, created = GpuRim.objects.select_for_update().get_or_create(rim_id=identity, defaults=fields)
    if created or row.sha384 == sha384:
        return identity, created
    # The one kept came from under another RIM root (the anchor was replaced since): no longer
    # NVIDIA's as far as this plane knows, so the one that is takes its place.
    if verify_rim(row.xml.encode(), root=rim_root, at=at):
        GpuRim.objects.filter(pk=row.pk).update(**fields, imported_at=Now(), retired_at=None)
        return identity, True
    raise ValueError(f"{identity} is imported already, another signed document (SHA-384 {row.sha384[:16]}…)")


def retire_gpu_rims(rim_ids: Collection[str]) -> int:
    """Retire drivers' or VBIOSes' RIMs: evidence of that release fails verification. Returns how
    many were in service before."""
    return GpuRim.objects.filter(rim_id__in=rim_ids, retired_at__isnull=True).update(retired_at=Now())


def return_gpu_rims_to_service(rim_ids: Collection[str]) -> int:
    """Undo a retirement. Returns how many were retired before."""
    return GpuRim.objects.filter(rim_id__in=rim_ids, retired_at__isnull=False).update(retired_at=None)


def read_documents(source: str) -> list[RimDocument]:
    """The RIMs at an operator's file, directory (every file in it) or http(s) URL (a RIM, or a
    catalogue of them: JSON {"rims": [{"url"}, ...]}, as a mirror or bmcsim serves it); ValueError
    saying what could not be read."""
    if source.startswith(("http://", "https://")):
        document = _download(source)
        urls = _catalogue(document.xml)
        return [_download(url) for url in urls] if urls is not None else [document]
    path = Path(source)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    documents = []
    for file in files:
        try:
            if file.stat().st_size > MAX_RIM_BYTES:
                raise ValueError(f"over {MAX_RIM_BYTES} bytes")
            documents.append(RimDocument(file.name, file.read_bytes()))
        except OSError as error:
            raise ValueError(f"cannot read {file}: {error}") from error
        except ValueError as error:
            raise ValueError(f"{file}: {error}") from error
    return documents


def _catalogue(body: bytes) -> list[str] | None:
    """The RIM URLs a catalogue lists; None for a body that is not one (a RIM itself)."""
    try:
        listing = json.loads(body)
    except ValueError:
        return None
    rims = listing.get("rims") if isinstance(listing, dict) else None
    if not isinstance(rims, list) or not all(isinstance(r, dict) and isinstance(r.get("url"), str) for r in rims):
        raise ValueError('a catalogue of RIMs must be {"rims": [{"url": "https://…"}, …]}')
    return [rim["url"] for rim in rims]


def _download(url: str) -> RimDocument:
    """Through core/outbound.py (within the deadline and the RIM size cap, no redirect followed).
    Any address: the operator chose it."""
    try:
        answer = outbound.request(
            "GET",
            url,
            check=outbound.any_address,
            deadline=settings.OUTBOUND_DEADLINE_SECONDS,
            max_body_bytes=MAX_RIM_BYTES,
            headers={"Accept": "application/xml, application/json"},
        )
    except outbound.OutboundError as error:
        raise ValueError(f"cannot read {url}: {error.reason}") from error
    if answer.status_code != 200:
        raise ValueError(f"cannot read {url}: answered {answer.status_code}")
    return RimDocument(url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1], answer.body)
