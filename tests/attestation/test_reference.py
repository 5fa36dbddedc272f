"""Reference values: bmcsim's manifest parses into entries and allowed digests; a manifest off its shape is refused."""

from __future__ import annotations

import copy

import pytest

from attestation.reference import ManifestError, ReferenceEntry, Refusal, parse_manifest, reference_values
from bmcsim import releases


def test_the_bmcsim_manifest_gives_every_release_of_every_component():
    entries = parse_manifest(releases.reference_values())
    assert len(entries) == 5 * 2 + 2 * 2
    kernel = releases.boot_digest("kernel", "vmlinuz-6.8.0-49-generic")
    assert ReferenceEntry(release="vmlinuz-6.8.0-49-generic", component="kernel", digest=kernel) in entries
    vbios = releases.gpu_digest("vbios", "96.00.99.00.01")
    assert ReferenceEntry(release="96.00.99.00.01", component="gpu.vbios", digest=vbios) in entries


def test_reference_values_keep_boot_components_and_gpu_measurements_apart():
    values = reference_values(parse_manifest(releases.reference_values()))
    assert set(values.components) == set(releases.BOOT_COMPONENTS)
    assert set(values.gpu) == set(releases.GPU_COMPONENTS)
    assert values.components["kernel"] == {
        releases.boot_digest("kernel", release) for release in releases.BOOT_RELEASES["kernel"]
    }
    assert releases.implant_kernel_digest("node-001") not in values.components["kernel"]


def test_entries_of_several_manifests_are_merged():
    first = ReferenceEntry("r1", "kernel", "aa" * 32)
    second = ReferenceEntry("r2", "kernel", "BB" * 32)
    assert reference_values([first, second]).components["kernel"] == {"aa" * 32, "bb" * 32}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.update(signed_by="someone"), r"unknown field 'manifest.signed_by'"),
        (lambda m: m.pop("gpu"), r"missing field 'manifest.gpu'"),
        (lambda m: m.update(version=2), r"'version' must be 1"),
        (lambda m: m.update(version=True), r"'version' must be 1"),
        (lambda m: m["boot"].update(hash_algorithm="sha1"), r"'boot.hash_algorithm' must be 'sha256'"),
        (lambda m: m["gpu"].update(hash_algorithm="sha256"), r"'gpu.hash_algorithm' must be 'sha384'"),
        (lambda m: m["boot"]["components"]["kernel"][0].pop("digest"), r"missing field 'boot.components.kernel\[0\]"),
        (
            lambda m: m["boot"]["components"]["kernel"][0].update(digest="ab" * 20),
            r"'boot.components.kernel\[0\].digest' must be 64 lowercase hex digits",
        ),
        (
            lambda m: m["gpu"]["measurements"]["vbios"][1].update(digest="AB" * 48),
            r"'gpu.measurements.vbios\[1\].digest' must be 96 lowercase hex digits",
        ),
        (lambda m: m["boot"]["components"].update(kernel=[]), r"'boot.components.kernel' must be a non-empty list"),
        (lambda m: m["boot"]["components"].update({"gpu.x": []}), r"a component name is 1 to 64 of a-z"),
        (lambda m: m["boot"]["pcrs"].update(kernel=24), r"'boot.pcrs.kernel' must be a PCR index"),
        (lambda m: m["boot"].update(quoted_pcrs="0,4"), r"'boot.quoted_pcrs' must be a list"),
        (lambda m: m["gpu"].update(model=""), r"'gpu.model' must be a string"),
    ],
)
def test_a_manifest_off_its_shape_is_refused_naming_the_field(change, message):
    manifest = copy.deepcopy(releases.reference_values())
    change(manifest)
    with pytest.raises(ManifestError, match=message):
        parse_manifest(manifest)


@pytest.mark.parametrize("document", [None, [], "manifest", 1])
def test_a_document_that_is_no_manifest_is_refused(document):
    with pytest.raises(ManifestError, match=r"'manifest' must be an object"):
        parse_manifest(document)


KERNEL_OLD, KERNEL_NEW = releases.BOOT_RELEASES["kernel"]
DRIVER_OLD, DRIVER_NEW = releases.GPU_RELEASES["driver"]


def bmcsim_values(**kwargs):
    return reference_values(parse_manifest(releases.reference_values()), **kwargs)


def test_a_retired_release_is_refused_naming_it_for_every_node():
    values = bmcsim_values(retired={KERNEL_NEW, DRIVER_OLD})
    new_kernel = releases.boot_digest("kernel", KERNEL_NEW)
    assert values.components["kernel"] == {releases.boot_digest("kernel", KERNEL_OLD)}
    assert values.refused["kernel"][new_kernel] == Refusal(KERNEL_NEW, retired=True)
    assert values.gpu["driver"] == {releases.gpu_digest("driver", DRIVER_NEW)}
    assert values.refused["gpu.driver"][releases.gpu_digest("driver", DRIVER_OLD)].retired
    assert len(values.components["bootloader"]) == 2  # nothing else changes


def test_pinning_a_release_refuses_the_other_releases_of_its_component_only():
    values = bmcsim_values(pinned={KERNEL_NEW})
    old_kernel = releases.boot_digest("kernel", KERNEL_OLD)
    assert values.components["kernel"] == {releases.boot_digest("kernel", KERNEL_NEW)}
    assert values.refused["kernel"][old_kernel] == Refusal(KERNEL_OLD, retired=False)
    assert len(values.components["initrd"]) == 2 and len(values.gpu["driver"]) == 2
    assert set(values.refused) == {"kernel"}


def test_a_retired_release_stays_refused_where_the_class_is_pinned_to_it():
    values = bmcsim_values(pinned={KERNEL_NEW}, retired={KERNEL_NEW})
    assert "kernel" not in values.components
    assert values.refused["kernel"][releases.boot_digest("kernel", KERNEL_NEW)].retired


def test_a_digest_another_accepted_release_shares_stays_accepted():
    entries = [ReferenceEntry("r1", "cmdline", "aa" * 32), ReferenceEntry("r2", "cmdline", "aa" * 32)]
    values = reference_values(entries, retired={"r1"})
    assert values.components["cmdline"] == {"aa" * 32}
    assert values.refused == {"cmdline": {}}
