"""manage.py seed_fleet: the default topology, bmcsim-style inventories, idempotence, clear errors."""

import json
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypedDict

import pytest
from django.core.management import CommandError, call_command

from core.topology import bmc_password, default_layout
from fleet.inventory import CSV_COLUMNS
from fleet.models import GPU, AuditEvent, FabricDomain, FabricLevel, Node, Pod, Rack
from tests.support.loopback import serving


def seed(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command("seed_fleet", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_default_topology_is_fifty_nodes_in_two_pods_and_seven_racks(db):
    assert "50 enrolled" in seed("--topology", "default")
    assert list(Pod.objects.values_list("name", flat=True)) == ["p1", "p2"]
    assert Rack.objects.count() == 7
    per_pod = Counter(Node.objects.values_list("rack__pod__name", flat=True))
    assert per_pod == {"p1": 32, "p2": 18}
    assert GPU.objects.count() == 400
    assert set(Node.objects.values_list("state", flat=True)) == {"enrolled"}
    assert AuditEvent.objects.filter(event="enrolled").count() == 50
    node = Node.objects.get(name="node-001")
    assert (node.rack.name, node.position, node.system_id) == ("r01", 1, "node-001")
    assert node.bmc_password == bmc_password("node-001")
    assert [g.uuid for g in node.gpus.all()] == [g.uuid for g in default_layout(1)[0].gpus]
    # A leaf switch per rack pair in each pod (tests/bmcsim/test_fabric.py names them): the
    # fabric level between pod and rack, kept as the layout draws it.
    assert list(FabricLevel.objects.values_list("name", flat=True)) == ["leaf"]
    assert leaf_of_each_rack() == {spec.rack: dict(spec.fabric)["leaf"] for spec in default_layout()}


def test_seeding_twice_changes_nothing(db):
    seed("--topology", "default")
    assert "0 enrolled, 0 updated, 50 unchanged" in seed("--topology", "default")
    assert Node.objects.count() == 50 and AuditEvent.objects.count() == 50


@pytest.mark.scale
def test_a_big_fleet_is_enrolled_in_batches(db):
    assert "10000 enrolled" in seed("--topology", "default", "--nodes", "10000")
    assert Node.objects.count() == 10000 and GPU.objects.count() == 80000
    assert Rack.objects.count() == 1250
    assert Node.objects.filter(name="node-10000", rack__name="r1250").exists()


class InventoryAnswer(TypedDict):
    status: int
    body: bytes
    content_type: str


@pytest.fixture
def inventory_server():
    """A data-center inventory on loopback that answers whatever the test sets."""
    answer: InventoryAnswer = {"status": 200, "body": b"{}", "content_type": "application/json"}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(answer["status"])
            self.send_header("Content-Type", answer["content_type"])
            self.end_headers()
            self.wfile.write(answer["body"])

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with serving(server) as url:
        yield url, answer


def inventory(**overrides) -> dict:
    base = "http://127.0.0.1:8100"
    nodes = []
    for spec in default_layout(3):
        entry = {
            "name": spec.name,
            "pod": spec.pod,
            "rack": spec.rack,
            "position": spec.position,
            "serial": spec.serial,
            "redfish_url": base,
            "system_id": spec.name,
            "credentials": {"username": "admin", "password": spec.bmc_password},
            "agent_url": f"{base}/agent/{spec.name}",
            "gpus": [{"index": g.index, "uuid": g.uuid, "serial": g.serial, "model": g.model} for g in spec.gpus],
        }
        nodes.append({**entry, **overrides})
    return {"nodes": nodes}


def test_enrols_from_an_inventory_and_refreshes_bmc_access(db, inventory_server):
    url, answer = inventory_server
    answer["body"] = json.dumps(inventory()).encode()
    assert "3 enrolled" in seed("--bmcsim-url", url)
    answer["body"] = json.dumps(inventory(credentials={"username": "admin", "password": "rotated"})).encode()
    assert "0 enrolled, 3 updated" in seed("--bmcsim-url", url)
    assert set(Node.objects.values_list("bmc_password", flat=True)) == {"rotated"}


def test_an_inventory_over_the_cap_of_other_answers_is_read(db, inventory_server, settings):
    # A whole fleet's inventory is larger than an answer from elsewhere may be: 10,000 of bmcsim's
    # nodes are 18 MB, over GPUFLEET_OUTBOUND_MAX_BODY_BYTES's default of 8 MiB.
    url, answer = inventory_server
    answer["body"] = json.dumps(inventory()).encode()
    settings.OUTBOUND_MAX_BODY_BYTES = len(answer["body"]) // 4
    assert "3 enrolled" in seed("--bmcsim-url", url)


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (200, b"<html>not json</html>", "not usable"),
        (200, b'{"nodes": [{"name": "node-001"}]}', "'credentials' must be dict"),
        (200, b'{"nodes": "all of them"}', "'nodes' list"),
        (500, b"{}", "cannot read the inventory"),
    ],
)
def test_a_bad_inventory_is_refused_with_a_clear_error(db, inventory_server, status, body, message):
    url, answer = inventory_server
    answer.update(status=status, body=body)
    with pytest.raises(CommandError, match=message):
        seed("--bmcsim-url", url)
    assert not Node.objects.exists()


def test_an_unreachable_bmcsim_says_what_to_do(db):
    with pytest.raises(CommandError, match="start bmcsim, or use --topology default"):
        seed("--bmcsim-url", "http://127.0.0.1:9")


def csv_inventory(nodes: list[dict], attributes: list[str] | None = None) -> str:
    """The nodes as a CSV inventory; with `attributes`, its optional column of that text per node."""
    header = ",".join([*CSV_COLUMNS, *(["attributes"] if attributes else [])])
    rows = [
        ",".join(
            [
                *(str(n[c]) for c in ("name", "pod", "rack", "position", "serial", "redfish_url", "system_id")),
                n["credentials"]["username"],
                n["credentials"]["password"],
                n["agent_url"],
                n["gpus"][0]["model"],
                " ".join(g["uuid"] for g in n["gpus"]),
                " ".join(g["serial"] for g in n["gpus"]),
                *([attributes[number]] if attributes else []),
            ]
        )
        for number, n in enumerate(nodes)
    ]
    return "\n".join([header, *rows]) + "\n"


@pytest.mark.parametrize("kind", ["json", "csv"])
def test_real_servers_are_enrolled_from_an_inventory_file_without_bmcsim(db, tmp_path, kind):
    document = inventory()
    path = tmp_path / f"inventory.{kind}"
    path.write_text(json.dumps(document) if kind == "json" else csv_inventory(document["nodes"]))
    assert "3 enrolled" in seed("--inventory", str(path), "--bmcsim-url", "http://127.0.0.1:9")
    node = Node.objects.get(name="node-002")
    assert node.bmc_password == bmc_password("node-002")
    assert [g.uuid for g in GPU.objects.filter(node=node).order_by("index")] == [
        g["uuid"] for g in document["nodes"][1]["gpus"]
    ]
    assert seed("--inventory", str(path)).endswith("3 unchanged\n")


def test_a_csv_inventory_may_give_each_node_attributes(db, tmp_path):
    path = tmp_path / "inventory.csv"
    path.write_text(csv_inventory(inventory()["nodes"], ["nic=cx7 memory_gb=2048", "", "nic=cx8"]))
    assert "3 enrolled" in seed("--inventory", str(path))
    assert dict(Node.objects.order_by("name").values_list("name", "attributes")) == {
        "node-001": {"memory_gb": "2048", "nic": "cx7"},
        "node-002": {},
        "node-003": {"nic": "cx8"},
    }


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("missing.json", None, "cannot read"),
        ("bad.json", "{not json", "is not usable"),
        ("no-url.json", json.dumps({"nodes": [{**inventory()["nodes"][0], "agent_url": None}]}), "'agent_url'"),
        (
            "agent-token.json",
            json.dumps({"nodes": [{**inventory()["nodes"][0], "agent_token": "set-once-kept-for-ever"}]}),
            "'agent_token' is no longer taken",
        ),
        ("short.csv", "name,pod\nnode-001,p1\n", "no column rack"),
        ("bad.csv", csv_inventory(inventory()["nodes"]).replace(",1,GF", ",first,GF", 1), "'position'"),
        ("pairs.csv", csv_inventory(inventory()["nodes"], ["nic=cx7", "cx7", ""]), "'attributes' must be name=value"),
        ("names.csv", csv_inventory(inventory()["nodes"], ["", "", "NIC=cx7"]), "node-003.attributes.NIC"),
    ],
)
def test_a_bad_inventory_file_is_refused_with_a_clear_error(db, tmp_path, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(CommandError, match=message):
        seed("--inventory", str(path))
    assert not Node.objects.exists()


def fabric_inventory(leaves: dict[str, str]) -> dict:
    """Three nodes in racks of one node each (r01-r03 of pod p1), each rack under the leaf `leaves` names."""
    document = inventory()
    document["fabric_levels"] = ["pod", "leaf", "nvlink_domain"]
    for number, node in enumerate(document["nodes"], start=1):
        node.update(rack=f"r0{number}", position=1)
        node["fabric"] = {"pod": "p1", "leaf": leaves[node["rack"]], "nvlink_domain": node["rack"]}
    return document


def leaf_of_each_rack() -> dict[str, str | None]:
    return dict(Rack.objects.order_by("name").values_list("name", "fabric_domain__name"))


def test_an_inventory_with_fabric_levels_puts_each_rack_under_its_leaf(db, tmp_path):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(fabric_inventory({"r01": "p1-leaf1", "r02": "p1-leaf1", "r03": "p1-leaf2"})))
    assert "3 enrolled" in seed("--inventory", str(path))
    assert list(FabricLevel.objects.values_list("name", "depth")) == [("leaf", 1)]
    assert leaf_of_each_rack() == {"r01": "p1-leaf1", "r02": "p1-leaf1", "r03": "p1-leaf2"}
    assert set(FabricDomain.objects.values_list("name", "pod__name", "parent")) == {
        ("p1-leaf1", "p1", None),
        ("p1-leaf2", "p1", None),
    }

    # The fabric is recabled: r02 moves to the second leaf.
    path.write_text(json.dumps(fabric_inventory({"r01": "p1-leaf1", "r02": "p1-leaf2", "r03": "p1-leaf2"})))
    assert seed("--inventory", str(path)).endswith("3 unchanged\n")
    assert leaf_of_each_rack() == {"r01": "p1-leaf1", "r02": "p1-leaf2", "r03": "p1-leaf2"}


def test_enrolment_does_not_redraw_the_fabrics_levels(db, tmp_path):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(fabric_inventory({"r01": "l1", "r02": "l1", "r03": "l2"})))
    seed("--inventory", str(path))
    document = fabric_inventory({"r01": "l1", "r02": "l1", "r03": "l2"})
    document["fabric_levels"] = ["pod", "spine_group", "nvlink_domain"]
    for node in document["nodes"]:
        node["fabric"] = {"pod": "p1", "spine_group": node["fabric"]["leaf"], "nvlink_domain": node["rack"]}
    path.write_text(json.dumps(document))
    with pytest.raises(CommandError, match="fabric levels between pod and rack are spine_group; the fleet's are leaf"):
        seed("--inventory", str(path))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["nodes"][0]["fabric"].pop("leaf"), "node-001.fabric: must name a domain at each level"),
        (lambda d: d["nodes"][0]["fabric"].update(nvlink_domain="r09"), "must put the node in its pod p1 and rack r01"),
        (  # r01 under p1-leaf1 for node-001, and under p1-leaf2 for node-003
            lambda d: (d["nodes"][2].update(rack="r01"), d["nodes"][2]["fabric"].update(nvlink_domain="r01")),
            "a rack must sit in one place",
        ),
        (lambda d: d.update(fabric_levels=["leaf"]), "fabric_levels: must be a list of 2 to 8 level names"),
    ],
)
def test_an_inventory_whose_fabric_is_no_tree_is_refused(db, tmp_path, change, message):
    document = fabric_inventory({"r01": "p1-leaf1", "r02": "p1-leaf1", "r03": "p1-leaf2"})
    change(document)
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CommandError, match=message):
        seed("--inventory", str(path))
    assert not Node.objects.exists() and not FabricDomain.objects.exists()
