"""What a sync asks of one manager, and what it concludes from the read-back: pure."""

from fleet.networks import NodeOnManager, Verdict, ports_to_change, read_as, verdicts

IDLE_VLAN = "10"


def test_only_the_ports_that_differ_are_changed_each_to_its_nodes_membership():
    nodes = [
        NodeOnManager(key=1, ports=("swp1",), wanted="1001", was_confirmed=False),
        NodeOnManager(key=2, ports=("swp2",), wanted="1001", was_confirmed=True),
        NodeOnManager(key=3, ports=("swp3",), wanted=None, was_confirmed=False),
    ]
    read = {"swp1": "10", "swp2": "1001", "swp3": "1002"}
    assert ports_to_change(nodes, read, idle=IDLE_VLAN) == {"swp1": "1001", "swp3": None}


def test_a_node_with_many_ports_changes_only_those_off_its_membership():
    node = NodeOnManager(key=1, ports=("g1", "g2", "g3"), wanted="0x1001", was_confirmed=False)
    assert ports_to_change([node], {"g1": "0x1001", "g2": "", "g3": "0x1001,0x1002"}, idle="") == {
        "g2": "0x1001",
        "g3": "0x1001",
    }


def test_a_port_the_manager_does_not_list_holds_nothing():
    node = NodeOnManager(key=1, ports=("gpu-a",), wanted="part-7", was_confirmed=False)
    assert ports_to_change([node], {}, idle="") == {"gpu-a": "part-7"}
    assert (
        ports_to_change([NodeOnManager(key=2, ports=("gpu-b",), wanted=None, was_confirmed=False)], {}, idle="") == {}
    )


def test_ports_that_disagree_read_as_every_value_and_match_nothing():
    assert read_as(("a", "b"), {"a": "0x1001", "b": "0x1001"}) == "0x1001"
    assert read_as(("a", "b"), {"a": "0x1001", "b": ""}) == "0x1001,"
    assert read_as(("a",), {}) == ""


def test_a_read_back_that_holds_what_is_wanted_confirms():
    nodes = [
        NodeOnManager(key=1, ports=("swp1",), wanted="1001", was_confirmed=False),
        NodeOnManager(key=2, ports=("swp2",), wanted=None, was_confirmed=False),
    ]
    after = {"swp1": "1001", "swp2": "1001"}
    assert verdicts(nodes, {"swp1": "10", "swp2": "1001"}, after, idle=IDLE_VLAN) == [
        Verdict(key=1, found="1001", confirmed=True),
        Verdict(key=2, found="1001", confirmed=False),
    ]


def test_drift_is_a_confirmed_node_found_elsewhere_before_the_change_naming_port_and_segment():
    nodes = [
        NodeOnManager(key=1, ports=("g1", "g2"), wanted="0x1001", was_confirmed=True),
        NodeOnManager(key=2, ports=("g3",), wanted=None, was_confirmed=True),
        NodeOnManager(key=3, ports=("g4",), wanted="0x1003", was_confirmed=False),  # never confirmed: not drift
    ]
    before = {"g1": "0x1001", "g2": "0x1002", "g3": "0x1001", "g4": ""}
    after = {"g1": "0x1001", "g2": "0x1001", "g3": "", "g4": "0x1003"}
    assert verdicts(nodes, before, after, idle="") == [
        Verdict(key=1, found="0x1001", confirmed=True, drifted=(("g2", "0x1002"),)),
        Verdict(key=2, found="", confirmed=True, drifted=(("g3", "0x1001"),)),
        Verdict(key=3, found="0x1003", confirmed=True),
    ]


def test_drift_that_was_not_put_back_stays_unconfirmed():
    node = NodeOnManager(key=1, ports=("swp4",), wanted="1001", was_confirmed=True)
    before = after = {"swp4": "1002"}
    assert verdicts([node], before, after, idle=IDLE_VLAN) == [
        Verdict(key=1, found="1002", confirmed=False, drifted=(("swp4", "1002"),))
    ]
