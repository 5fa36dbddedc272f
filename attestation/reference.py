"""Reference values: the golden digests of each firmware, boot-chain and GPU release.

A manifest (bmcsim serves one at GET /bmcsim/v1/reference-values) has this shape, and nothing
else is accepted::

    {"issuer": str, "version": 1,
     "boot": {"hash_algorithm": "sha256", "pcrs": {component: pcr}, "quoted_pcrs": [pcr, ...],
              "components": {component: [{"release": str, "digest": hex}, ...]}},
     "gpu": {"hash_algorithm": "sha384", "model": str,
             "measurements": {measurement: [{"release": str, "digest": hex}, ...]}}}

`parse_manifest` flattens it into entries; a GPU measurement's entry is named with the
`gpu.` prefix (`gpu.vbios`), a boot component's by its bare name (`kernel`). Component names
are lowercase letters, digits, `_` and `-`, so the prefix can never be mistaken.

`reference_values` turns entries into the digests a node may present: not those of a release
operators retired, and, where the node's class is pinned to releases, not another release of a
component they name. Those it keeps apart (`refused`), so that the verifier names the release.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from core import validation

GPU_PREFIX = "gpu."
MANIFEST_VERSION = 1
DIGEST_HEX_LENGTH = {"sha256": 64, "sha384": 96}
COMPONENT_NAME = re.compile(r"[a-z0-9_-]{1,64}")
MAX_RELEASE_LENGTH = 200
MAX_PCR = 23


class ManifestError(ValueError):
    """The manifest does not have the documented shape; the message names the field."""


@dataclass(frozen=True)
class ReferenceEntry:
    release: str
    component: str  # a boot component, or "gpu.<measurement>"
    digest: str  # lowercase hex


@dataclass(frozen=True)
class Refusal:
    """Why a known release's digest is not accepted for this node."""

    release: str
    retired: bool  # retired by operators; else not among the releases the node's class is pinned to


@dataclass(frozen=True)
class ReferenceValues:
    components: Mapping[str, frozenset[str]]  # boot component -> allowed SHA-256 hex digests
    gpu: Mapping[str, frozenset[str]]  # GPU measurement -> allowed SHA-384 hex digests
    # Digests of releases known but refused, by entry component ("kernel", "gpu.vbios"): a node
    # booting one fails as release_retired or release_not_pinned, not as unknown.
    refused: Mapping[str, Mapping[str, Refusal]] = field(default_factory=lambda: MappingProxyType({}))


def parse_manifest(document: object) -> list[ReferenceEntry]:
    try:
        return _entries(document)
    except validation.Invalid as error:
        raise ManifestError(f"'{error.path}' {error.problem}") from None


def _entries(document: object) -> list[ReferenceEntry]:
    top = _object(document, "manifest", {"issuer", "version", "boot", "gpu"})
    _text(top["issuer"], "issuer")
    validation.one_of(top["version"], "version", (MANIFEST_VERSION,))

    boot = _object(top["boot"], "boot", {"hash_algorithm", "pcrs", "quoted_pcrs", "components"})
    validation.one_of(boot["hash_algorithm"], "boot.hash_algorithm", ("sha256",))
    for component, pcr in validation.mapping(boot["pcrs"], "boot.pcrs").items():
        _component(component, f"boot.pcrs.{component}")
        _pcr(pcr, f"boot.pcrs.{component}")
    quoted_pcrs = validation.sequence(boot["quoted_pcrs"], "boot.quoted_pcrs", expected="a list of PCR indexes")
    for position, pcr in enumerate(quoted_pcrs):
        _pcr(pcr, validation.at("boot.quoted_pcrs", position))
    entries = _releases(boot["components"], "boot.components", "", DIGEST_HEX_LENGTH["sha256"])

    gpu = _object(top["gpu"], "gpu", {"hash_algorithm", "model", "measurements"})
    validation.one_of(gpu["hash_algorithm"], "gpu.hash_algorithm", ("sha384",))
    _text(gpu["model"], "gpu.model")
    entries += _releases(gpu["measurements"], "gpu.measurements", GPU_PREFIX, DIGEST_HEX_LENGTH["sha384"])
    return entries


def reference_values(
    entries: Iterable[ReferenceEntry], *, retired: Collection[str] = (), pinned: Collection[str] = ()
) -> ReferenceValues:
    """The digests a node may present. A `retired` release's are refused for every node. A node
    class `pinned` to releases may boot, of each component one of them names, only those: pinning
    "vmlinuz-6.8.0-49-generic" refuses every other kernel and leaves the other components as
    they were. A digest that an accepted release also has stays accepted."""
    entries = list(entries)
    pinned_components = {entry.component for entry in entries if entry.release in pinned}
    accepted: dict[str, set[str]] = {}
    refused: dict[str, dict[str, Refusal]] = {}
    for entry in entries:
        digest = entry.digest.lower()
        if entry.release in retired:
            refused.setdefault(entry.component, {})[digest] = Refusal(entry.release, retired=True)
        elif entry.component in pinned_components and entry.release not in pinned:
            refused.setdefault(entry.component, {}).setdefault(digest, Refusal(entry.release, retired=False))
        else:
            accepted.setdefault(entry.component, set()).add(digest)
    for component, digests in accepted.items():
        for digest in digests & refused.get(component, {}).keys():
            del refused[component][digest]
    return ReferenceValues(
        components=MappingProxyType(
            {name: frozenset(digests) for name, digests in accepted.items() if not name.startswith(GPU_PREFIX)}
        ),
        gpu=MappingProxyType(
            {
                name.removeprefix(GPU_PREFIX): frozenset(digests)
                for name, digests in accepted.items()
                if name.startswith(GPU_PREFIX)
            }
        ),
        refused=MappingProxyType({name: MappingProxyType(by_digest) for name, by_digest in refused.items()}),
    )


def _releases(value: object, where: str, prefix: str, hex_length: int) -> list[ReferenceEntry]:
    hex_digits = re.compile(f"[0-9a-f]{{{hex_length}}}")
    entries = []
    for component, releases in validation.mapping(value, where).items():
        key = f"{where}.{component}"
        _component(component, key)
        releases = validation.sequence(releases, key, min_items=1, expected="a non-empty list of {release, digest}")
        for position, item in enumerate(releases):
            place = validation.at(key, position)
            release = _object(item, place, {"release", "digest"})
            name = _text(release["release"], f"{place}.release")
            digest = validation.matches(
                release["digest"], f"{place}.digest", hex_digits, f"{hex_length} lowercase hex digits"
            )
            entries.append(ReferenceEntry(release=name, component=prefix + component, digest=digest))
    return entries


def _object(value: object, where: str, keys: set[str]) -> dict[str, object]:
    fields = validation.mapping(value, where)
    unknown = sorted(str(k) for k in fields.keys() - keys)
    if unknown:
        raise ManifestError(f"unknown field '{where}.{unknown[0]}'")
    missing = sorted(keys - fields.keys())
    if missing:
        raise ManifestError(f"missing field '{where}.{missing[0]}'")
    return fields


def _text(value: object, where: str) -> str:
    return validation.text(
        value, where, max_length=MAX_RELEASE_LENGTH, expected=f"a string of 1 to {MAX_RELEASE_LENGTH} characters"
    )


def _component(name: object, where: str) -> None:
    if not isinstance(name, str) or not COMPONENT_NAME.fullmatch(name):
        raise ManifestError(f"'{where}': a component name is 1 to 64 of a-z, 0-9, '_' and '-'")


def _pcr(value: object, where: str) -> None:
    validation.integer(value, where, minimum=0, maximum=MAX_PCR, expected=f"a PCR index from 0 to {MAX_PCR}")
