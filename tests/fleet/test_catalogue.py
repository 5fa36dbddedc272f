"""The operators' catalogue and pools from the command line: import_images and add_address_pool."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from fleet.models import AddressPool, Image, Pod

SHA = "0f" * 32


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def catalogue(tmp_path, images) -> str:
    path = tmp_path / "images.json"
    path.write_text(json.dumps({"images": images}))
    return str(path)


def image(name, **extra) -> dict:
    return {"name": name, "os": "ubuntu-24.04", "url": f"http://img/{name}.iso", "sha256": SHA, **extra}


def test_images_are_added_then_brought_up_to_date_and_one_default_stays(db, tmp_path):
    assert run("import_images", catalogue(tmp_path, [image("a", default=True), image("b")])) == (
        f"2 images added, 0 updated from {tmp_path}/images.json\n"
    )
    assert "0 images added, 0 updated" in run("import_images", catalogue(tmp_path, [image("a", default=True)]))
    assert "0 images added, 1 updated" in run("import_images", catalogue(tmp_path, [image("b", default=True)]))
    assert list(Image.objects.filter(default=True).values_list("name", flat=True)) == ["b"]


@pytest.mark.parametrize(
    ("images", "says"),
    [
        ([image("a", sha256="XYZ")], r"images\[0\].sha256: must be 64 lower-case hex digits"),
        ([image("a b")], r"images\[0\].name: must be a slug"),
        ([image("a", url="ftp://x")], r"images\[0\].url: must be an http\(s\) URL"),
        ([image("a", default=True), image("b", default=True)], "at most one image may be the default"),
        ([image("a", boot_mode="BIOS")], "boot_mode: must be one of UEFI, Legacy"),
    ],
)
def test_a_bad_catalogue_adds_nothing_and_says_where(db, tmp_path, images, says):
    with pytest.raises(CommandError, match=says):
        run("import_images", catalogue(tmp_path, images))
    assert not Image.objects.exists()


def test_pools_are_added_once_and_checked(db):
    Pod.objects.create(name="p1")
    assert run("add_address_pool", "p1", "10.100.1.0/24", "--gateway", "10.100.1.1", "--ssh-port", "2222") == (
        "pool 10.100.1.0/24 added to pod p1\n"
    )
    assert run("add_address_pool", "p1", "10.100.1.0/24") == "pool 10.100.1.0/24 already in pod p1\n"
    assert AddressPool.objects.get().ssh_port == 2222
    with pytest.raises(CommandError, match="no pod named 'p9'"):
        run("add_address_pool", "p9", "10.9.0.0/24")
    with pytest.raises(CommandError, match=r"gateway: 10\.2\.0\.1 is outside 10\.100\.2\.0/24"):
        run("add_address_pool", "p1", "10.100.2.0/24", "--gateway", "10.2.0.1")
