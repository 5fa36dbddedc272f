"""What a tenant gives its nodes: SSH keys (parsed and fingerprinted as ssh-keygen does), an image
from the catalogue, user data; and what it gets back: each node's address and host key."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import services as fleet_services
from fleet.models import AddressPool, AuditEvent, Image, Node, Pod
from reservations import services as reservations_services
from reservations.models import MAX_USER_DATA_BYTES, Reservation
from reservations.selectors import live_allocations
from reservations.ssh_keys import BadKey, parse
from tests.support.agent_credentials import drive_files
from tests.support.api import post
from tests.support.factories import drive
from tests.support.processes import tool

SHA = "ab" * 32


def openssh(private) -> str:
    return (
        private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    )


@pytest.mark.parametrize(
    "private",
    [
        ed25519.Ed25519PrivateKey.generate(),
        ec.generate_private_key(ec.SECP256R1()),
        rsa.generate_private_key(65537, 3072),
    ],
    ids=["ed25519", "ecdsa", "rsa"],
)
def test_a_key_is_fingerprinted_as_ssh_keygen_does(private, tmp_path):
    line = openssh(private) + " alice@laptop"
    (tmp_path / "key.pub").write_text(line + "\n")
    ssh_keygen = subprocess.run([tool("ssh-keygen"), "-lf", str(tmp_path / "key.pub")], capture_output=True, text=True)
    parsed = parse(f"  {line}\n")
    assert parsed.fingerprint == ssh_keygen.stdout.split()[1]
    assert parsed.line == line


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "key type must be one of"),
        ("ssh-ed25519 not-base64!", "does not decode"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5", "does not decode"),
        (
            openssh(ed25519.Ed25519PrivateKey.generate()) + "\n" + openssh(ed25519.Ed25519PrivateKey.generate()),
            "one key",
        ),
        (openssh(rsa.generate_private_key(65537, 1024)), "at least 2048 bits"),
        ("", "key type must be one of"),
    ],
)
def test_a_bad_key_says_what_is_wrong(text, says):
    with pytest.raises(BadKey, match=says):
        parse(text)


def test_a_tenant_keeps_its_keys_and_no_one_elses(acme, globex):
    key = openssh(ed25519.Ed25519PrivateKey.generate())
    added = post(acme, "/v1/ssh-keys", {"name": "laptop", "public_key": key})
    assert added.status_code == 201, added.content
    body = added.json()
    assert set(body) == {"id", "name", "public_key", "fingerprint", "created_at"}
    assert body["fingerprint"] == parse(key).fingerprint
    assert post(
        acme, "/v1/ssh-keys", {"name": "laptop", "public_key": openssh(ed25519.Ed25519PrivateKey.generate())}
    ).json() == {"detail": "you have a key named 'laptop' already"}
    again = post(acme, "/v1/ssh-keys", {"name": "desk", "public_key": key})
    assert again.status_code == 409 and "named 'laptop'" in again.json()["detail"]
    assert post(globex, "/v1/ssh-keys", {"name": "laptop", "public_key": key}).status_code == 201  # keys are per tenant
    bad = post(acme, "/v1/ssh-keys", {"name": "x", "public_key": "ssh-rsa AAAA"})
    assert bad.status_code == 400 and "public_key" in bad.json()["detail"]
    assert [k["name"] for k in acme.get("/v1/ssh-keys").json()["results"]] == ["laptop"]
    assert globex.delete(f"/v1/ssh-keys/{body['id']}").status_code == 404
    assert acme.delete(f"/v1/ssh-keys/{body['id']}").status_code == 204
    assert acme.delete(f"/v1/ssh-keys/{body['id']}").status_code == 404


@pytest.fixture
def catalogue(db):
    Image.objects.create(name="ubuntu-24-04", os="ubuntu-24.04", url="http://img/u.iso", sha256=SHA, default=True)
    return Image.objects.create(name="rocky-9", os="rocky-9", url="http://img/r.iso", sha256="cd" * 32)


def test_the_catalogue_lists_the_images_and_a_reservation_boots_the_default_or_the_one_named(
    acme, catalogue, available_fleet
):
    images = acme.get("/v1/images").json()
    assert [(i["name"], i["os"], i["sha256"], i["default"]) for i in images] == [
        ("rocky-9", "rocky-9", "cd" * 32, False),
        ("ubuntu-24-04", "ubuntu-24.04", SHA, True),
    ]
    assert post(acme, "/v1/reservations", {"node_count": 1}).json()["image"] == "ubuntu-24-04"
    key = post(acme, "/v1/ssh-keys", {"name": "k", "public_key": openssh(ed25519.Ed25519PrivateKey.generate())}).json()
    named = post(
        acme,
        "/v1/reservations",
        {"node_count": 1, "image": "rocky-9", "ssh_keys": [key["id"]], "user_data": "#cloud-config\n"},
    )
    assert named.status_code == 201, named.content
    assert (named.json()["image"], named.json()["ssh_keys"]) == ("rocky-9", [key["id"]])
    assert Reservation.objects.get(pk=named.json()["id"]).user_data == "#cloud-config\n"


@pytest.mark.parametrize("starts", ["now", "tomorrow"])
def test_the_answer_to_a_create_is_what_reading_it_back_answers(acme, catalogue, available_fleet, starts):
    # The create answers from what it placed; a read answers from the database.
    keys = [
        post(acme, "/v1/ssh-keys", {"name": name, "public_key": openssh(ed25519.Ed25519PrivateKey.generate())}).json()
        for name in ("zed", "amy")
    ]
    body = {"node_count": 3, "ssh_keys": [k["id"] for k in keys]}
    if starts == "tomorrow":
        start = timezone.now() + timedelta(days=1)
        body |= {"starts_at": start.isoformat(), "ends_at": (start + timedelta(hours=2)).isoformat()}
    created = post(acme, "/v1/reservations", body)
    assert created.status_code == 201, created.content
    answer = created.json()
    assert answer["ssh_keys"] == [keys[1]["id"], keys[0]["id"]]  # in the order of their names
    assert len(answer["nodes"]) == 3 and answer["nodes"] == sorted(answer["nodes"])
    assert answer["image"] == "ubuntu-24-04"
    assert acme.get(f"/v1/reservations/{answer['id']}").json() == answer


def test_a_page_of_reservations_is_read_in_as_many_queries_however_long(
    acme, catalogue, available_fleet, django_assert_num_queries
):
    key = post(acme, "/v1/ssh-keys", {"name": "k", "public_key": openssh(ed25519.Ed25519PrivateKey.generate())}).json()
    for image in ("rocky-9", "rocky-9", "ubuntu-24-04"):
        body = {"node_count": 1, "image": image, "ssh_keys": [key["id"]]}
        assert post(acme, "/v1/reservations", body).status_code == 201
    # The key, the count, the page, and its nodes, machines, keys and networks: one query each.
    for limit in (1, 3):
        with django_assert_num_queries(7):
            page = acme.get(f"/v1/reservations?limit={limit}").json()["results"]
        assert [r["image"] for r in page] == ["ubuntu-24-04", "rocky-9", "rocky-9"][:limit]
        assert all(r["ssh_keys"] == [key["id"]] and len(r["machines"]) == 1 for r in page)


def test_a_create_reads_the_clock_and_the_quota_with_the_key(acme, catalogue, available_fleet):
    with CaptureQueriesContext(connection) as captured:
        assert post(acme, "/v1/reservations", {"node_count": 1}).status_code == 201
    statements = [query["sql"].lower() for query in captured]
    key = statements[0]
    assert 'from "reservations_apikey"' in key and '"reservations_quota"' in key and "statement_timestamp()" in key
    # ... and in no statement of their own.
    assert "select statement_timestamp()" not in statements
    assert not any(sql.startswith('select "reservations_quota"') for sql in statements)


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"image": "windows-95"}, "image", "does not exist"),
        ({"ssh_keys": [999999]}, "ssh_keys", "does not exist"),
        ({"ssh_keys": "1"}, "ssh_keys", "list"),
        ({"user_data": "x" * (MAX_USER_DATA_BYTES + 1)}, "user_data", f"at most {MAX_USER_DATA_BYTES} bytes"),
        ({"user_data": "é" * (MAX_USER_DATA_BYTES // 2 + 1)}, "user_data", "bytes"),  # bytes, not characters
    ],
)
def test_bad_nodes_options_are_a_400_that_names_the_field(acme, catalogue, available_fleet, body, field, says):
    answer = post(acme, "/v1/reservations", {"node_count": 1, **body})
    assert answer.status_code == 400 and field in answer.json()["detail"] and says in answer.json()["detail"], (
        answer.content
    )
    assert not Reservation.objects.exists()


def test_another_tenants_key_is_refused_as_if_it_did_not_exist(acme, globex, catalogue, available_fleet):
    theirs = post(
        globex, "/v1/ssh-keys", {"name": "k", "public_key": openssh(ed25519.Ed25519PrivateKey.generate())}
    ).json()
    answer = post(acme, "/v1/reservations", {"node_count": 1, "ssh_keys": [theirs["id"]]})
    assert answer.status_code == 400 and f'Invalid pk \\"{theirs["id"]}\\"' in answer.content.decode()


def address_of(node: Node) -> str:
    assigned = fleet_services.assign_address(node_id=node.pk)
    assert assigned is not None, f"{node.name} got no address"
    return assigned.address


def test_each_serving_node_gets_the_lowest_free_address_of_its_pods_pool_until_it_stops_serving(acme, available_fleet):
    AddressPool.objects.create(
        pod=Pod.objects.get(name="p2"), network="10.100.2.0/29", gateway="10.100.2.1", ssh_port=2222
    )
    reservation = post(acme, "/v1/reservations", {"node_count": 3, "pod": "p2"}).json()
    nodes = list(Node.objects.filter(reservation_id=reservation["id"]).order_by("name"))
    addresses = [address_of(n) for n in nodes]
    assert addresses == ["10.100.2.2", "10.100.2.3", "10.100.2.4"]  # the gateway is skipped
    assert address_of(nodes[0]) == "10.100.2.2"  # the same one again
    fleet_services.record_host_key(node_id=nodes[0].pk, fingerprint="SHA256:abc")
    machines = acme.get(f"/v1/reservations/{reservation['id']}").json()["machines"]
    assert machines[0] == {
        "name": nodes[0].name,
        "state": "provisioning",
        "address": "10.100.2.2",
        "ssh_port": 2222,
        "host_key_fingerprint": "SHA256:abc",
        "private_address": None,
    }
    token = fleet_services.tenancy_drive_token(node_id=nodes[0].pk, files=lambda: {"user-data": "#!/bin/sh\n"})
    assert drive_files(acme.get(f"/v1/config-drives/{token}").content)["user-data"] == "#!/bin/sh\n"

    drive(nodes[0], "provision_failed")  # to wiping: address, config drive and host key go
    assert acme.get(f"/v1/config-drives/{token}").status_code == 404
    assert Node.objects.get(pk=nodes[0].pk).ssh_host_key_fingerprint == ""
    other = Node.objects.filter(rack__pod__name="p2", state="available").first()
    assert other is not None
    drive(other, "provision_requested", reservation=Reservation.objects.get(pk=reservation["id"]))
    assert address_of(other) == "10.100.2.2"  # given back, taken again


def test_a_full_pool_is_said_so(acme, available_fleet):
    AddressPool.objects.create(pod=Pod.objects.get(name="p2"), network="10.100.3.0/30")  # two hosts
    reservation = post(acme, "/v1/reservations", {"node_count": 3, "pod": "p2"}).json()
    nodes = Node.objects.filter(reservation_id=reservation["id"]).order_by("name")
    fleet_services.assign_address(node_id=nodes[0].pk)
    fleet_services.assign_address(node_id=nodes[1].pk)
    with pytest.raises(fleet_services.NoAddressFree, match="every address of pod p2's pools is taken"):
        fleet_services.assign_address(node_id=nodes[2].pk)


@pytest.mark.parametrize(
    ("network", "gateway", "says"),
    [
        ("10.1.0.0/33", None, "not a network in CIDR form"),
        ("10.1.0.1/24", None, "host bits set"),
        ("10.1.0.0/24", "10.2.0.1", "outside"),
    ],
)
def test_an_operator_cannot_enter_a_pool_that_is_no_network(db, network, gateway, says):
    pool = AddressPool(pod=Pod.objects.create(name="p9"), network=network, gateway=gateway)
    with pytest.raises(ValidationError, match=says):
        pool.full_clean()


def test_a_tenant_reports_a_broken_node_it_leaves_for_the_operators_and_is_replaced(acme, globex, available_fleet):
    reservation = post(acme, "/v1/reservations", {"node_count": 2, "pod": "p1"}).json()
    broken = reservation["nodes"][0]
    path = f"/v1/reservations/{reservation['id']}/nodes/{broken}/report"
    assert post(globex, path, {"description": "mine?"}).status_code == 404  # another tenant's node
    assert (
        post(acme, f"/v1/reservations/{reservation['id']}/nodes/node-999/report", {"description": "x"}).status_code
        == 404
    )
    assert post(acme, path, {}).status_code == 400

    answer = post(acme, path, {"description": "GPU 3 throws NaNs in every matmul; nvidia-smi hangs"})

    assert answer.status_code == 202, answer.content
    node = Node.objects.get(name=broken)
    assert node.state == "quarantined"
    assert node.quarantine_reason == "tenant_report: GPU 3 throws NaNs in every matmul; nvidia-smi hangs"
    assert broken not in answer.json()["nodes"] and answer.json()["state"] == "degraded"
    healed = reservations_services.heal_reservation(reservation_id=reservation["id"])  # what the task runs
    assert len(live_allocations().filter(reservation=healed)) == 2
    # The public listener withholds the tenant's words, in the node and in its history.
    with override_settings(ROOT_URLCONF="gpufleet.urls_public"):
        for page in (f"/v1/nodes/{broken}", f"/nodes/{broken}"):
            shown = Client().get(page).content.decode()
            assert "NaNs" not in shown and "reported broken by its tenant" in shown, page


def test_reports_are_capped_per_tenant(acme, available_fleet, settings):
    settings.TENANT_REPORTS_PER_DAY = 1
    reservation = post(acme, "/v1/reservations", {"node_count": 2, "pod": "p1"}).json()
    first, second = reservation["nodes"]
    assert (
        post(acme, f"/v1/reservations/{reservation['id']}/nodes/{first}/report", {"description": "a"}).status_code
        == 202
    )
    refused = post(acme, f"/v1/reservations/{reservation['id']}/nodes/{second}/report", {"description": "b"})
    assert refused.status_code == 429 and "reported 1 nodes in the last 24 hours" in refused.json()["detail"]
    assert Node.objects.get(name=second).state == "provisioning"


def test_power_actions_need_an_active_node_of_ones_own_and_are_rate_limited_per_node(
    acme, globex, available_fleet, settings
):
    settings.TENANT_POWER_ACTIONS_PER_HOUR = 2
    reservation = post(acme, "/v1/reservations", {"node_count": 1, "pod": "p2"}).json()
    (name,) = reservation["nodes"]
    here = f"/v1/reservations/{reservation['id']}/nodes/{name}"
    early = post(acme, f"{here}/reboot", {})
    assert (
        early.status_code == 409
        and early.json()["detail"] == f"{name} is provisioning: only an active node can be rebooted"
    )
    drive(Node.objects.get(name=name), "provision_succeeded")
    assert post(globex, f"{here}/reboot", {}).status_code == 404
    assert post(acme, f"{here}/reboot", {}).status_code == 202
    assert post(acme, f"{here}/power-cycle", {}).status_code == 202
    third = post(acme, f"{here}/reboot", {})
    assert third.status_code == 429 and "2 power actions in the last hour" in third.json()["detail"]
    assert list(
        AuditEvent.objects.filter(node__name=name, event="power_action").order_by("id").values_list("actor", "reason")
    ) == [
        ("tenant:acme", "reboot"),
        ("tenant:acme", "power-cycle"),
    ]


def test_an_ipv6_pool_hands_out_addresses_too(acme, available_fleet):
    AddressPool.objects.create(pod=Pod.objects.get(name="p2"), network="fd00:100:2::/64", gateway="fd00:100:2::1")
    reservation = post(acme, "/v1/reservations", {"node_count": 2, "pod": "p2"}).json()
    nodes = Node.objects.filter(reservation_id=reservation["id"]).order_by("name")
    assert [address_of(n) for n in nodes] == ["fd00:100:2::2", "fd00:100:2::3"]
